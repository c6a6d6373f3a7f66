package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// The journal file: fileMagic, the number of entries (uint32), the
// entries, then a CRC-32C of everything before it. An entry names its
// policy by ID and revision and carries the subject digest, the tag, the
// cost, when it was journalled and what a release or a settle names
// (LeaseAt); never a raw descriptor value:
//
//	kind u8 | len(ID) u8 | ID | revision u32 | cost u64 | at i64 (Unix ms) | leaseAt i64 | subject [32] | tag [8]
//
// Integers are big-endian. A file of the first format (fileMagicV1) is
// still read: its entries have no leaseAt (0) and are charges and
// releases only.
const (
	fileMagic   = "ERLSJNL2"
	fileMagicV1 = "ERLSJNL1"
	// maxRecordBytes bounds one entry in the file.
	maxRecordBytes = 2 + limiter.MaxPolicyIDLength + 4 + 8 + 8 + 8 + 32 + 8
	fileOverhead   = len(fileMagic) + 4 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is matched by the error of Restore for a file it cannot
// read as a journal (errors.Is); the file is then moved to its name with
// ".corrupt" appended.
var errCorrupt = errors.New("journal: file is not a journal this version reads")

// save writes the entries held to the journal file (a temporary file
// beside it, renamed over it) and empties the journal.
func (j *Journal) save() (left int, saved bool, err error) {
	j.replaying.Lock()
	defer j.replaying.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	n := j.q.len()
	if n == 0 {
		// Nothing to keep: a file left from before would be applied again.
		if err := os.Remove(j.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, false, fmt.Errorf("journal: %w", err)
		}
		return 0, true, nil
	}
	buf := make([]byte, 0, fileOverhead+n*(maxRecordBytes/2))
	buf = append(buf, fileMagic...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	for i := range n {
		buf = appendRecord(buf, j.q.at(i))
	}
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	if err := writeAtomic(j.file, buf); err != nil {
		return n, false, err
	}
	j.q.drop(n)
	j.held.Store(0)
	j.observer.Entries(0)
	return n, true, nil
}

func appendRecord(b []byte, e *entry) []byte {
	id := e.policy.ID()
	b = append(b, byte(e.kind), byte(len(id)))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint32(b, e.policy.Revision())
	b = binary.BigEndian.AppendUint64(b, uint64(e.cost))
	b = binary.BigEndian.AppendUint64(b, uint64(e.at))
	b = binary.BigEndian.AppendUint64(b, uint64(e.leaseAt))
	b = append(b, e.subject[:]...)
	return append(b, e.tag[:]...)
}

// writeAtomic writes data to path through a temporary file in the same
// directory, synced, then renamed over path: a reader finds the old file,
// the new one, or none; never a part.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("journal: writing %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync() // the rename reaches the disk; not every system can sync a directory
		_ = d.Close()
	}
	return nil
}

// record is one entry as the file holds it.
type record struct {
	kind     kind
	id       string
	revision uint32
	cost     int64
	at       int64
	leaseAt  int64
	subject  limiter.SubjectDigest
	tag      limiter.Tag
}

// Restore reads the journal file (Config.File) that an earlier Stop
// wrote, removes it, and keeps its entries, resolved against policies (the
// rules in service): an entry whose policy ID and revision none of
// policies has is dropped (ReasonPolicyGone), as is one that no longer
// settles anything under it (ReasonInvalid); a cost above the policy's
// max cost is cut to it (what a charge records, see pkg/rls). Entries
// beyond Config.MaxEntries are dropped (ReasonFull).
//
// The file is removed before any entry is kept, so that no entry is
// applied twice: when it cannot be removed, nothing is kept. A file that
// is not a journal (ErrCorrupt, or one larger than Config.MaxEntries
// entries can make) is moved aside to its name with ".corrupt" appended.
// No file is no error. Call Restore before Run.
func (j *Journal) Restore(policies []*limiter.Policy) (restored int, err error) {
	if j.file == "" {
		return 0, nil
	}
	recs, err := readFile(j.file, j.max)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil
	case errors.Is(err, errCorrupt):
		if rerr := os.Rename(j.file, j.file+".corrupt"); rerr != nil {
			return 0, errors.Join(err, fmt.Errorf("journal: moving it aside: %w", rerr))
		}
		return 0, fmt.Errorf("%w (moved to %s.corrupt)", err, j.file)
	case err != nil:
		return 0, err
	}
	if err := os.Remove(j.file); err != nil {
		return 0, fmt.Errorf("journal: %d entries not restored: the file cannot be removed, and they would be applied again at the next start: %w", len(recs), err)
	}
	type idRev struct {
		id  string
		rev uint32
	}
	byID := make(map[idRev]*limiter.Policy, len(policies))
	for _, p := range policies {
		if p != nil {
			byID[idRev{p.ID(), p.Revision()}] = p
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range recs {
		rc := &recs[i]
		p := byID[idRev{rc.id, rc.revision}]
		if p == nil {
			j.observer.Dropped(rc.kind, reasonPolicyGone, 1)
			continue
		}
		e := entry{policy: p, subject: rc.subject, tag: rc.tag, cost: min(rc.cost, p.MaxCost()), at: rc.at, leaseAt: rc.leaseAt, kind: rc.kind}
		r := e.request()
		if k, ok := settles(&r); !ok || k != rc.kind || r.Validate() != nil {
			j.observer.Dropped(rc.kind, reasonInvalid, 1)
			continue
		}
		if j.q.len() >= j.max {
			j.observer.Dropped(rc.kind, reasonFull, 1)
			continue
		}
		j.q.push(e)
		restored++
	}
	j.held.Store(int64(j.q.len()))
	j.observer.Entries(j.q.len())
	if restored > 0 {
		j.wake()
	}
	return restored, nil
}

// readFile reads and checks the journal file at path, of at most max
// entries.
func readFile(path string, max int) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	limit := int64(fileOverhead) + int64(max)*maxRecordBytes
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("journal: reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d entries can make", errCorrupt, path, max)
	}
	recs, err := parseFile(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCorrupt, path, err)
	}
	return recs, nil
}

// parseFile decodes a journal file's bytes, of either format.
func parseFile(data []byte) ([]record, error) {
	v1 := bytes.HasPrefix(data, []byte(fileMagicV1))
	if len(data) < fileOverhead || !v1 && !bytes.HasPrefix(data, []byte(fileMagic)) {
		return nil, errors.New("no journal header")
	}
	kinds, fixed := numKinds, 4+8+8+8+32+8
	if v1 {
		kinds, fixed = kindSettle, 4+8+8+32+8
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	n := binary.BigEndian.Uint32(body[len(fileMagic):])
	b := body[len(fileMagic)+4:]
	if uint64(n) > uint64(len(b)) {
		return nil, fmt.Errorf("%d entries in %d bytes", n, len(b))
	}
	recs := make([]record, 0, n)
	for range n {
		if len(b) < 2 {
			return nil, errors.New("truncated entry")
		}
		var rc record
		rc.kind = kind(b[0])
		idLen := int(b[1])
		b = b[2:]
		if rc.kind >= kinds || idLen == 0 || idLen > limiter.MaxPolicyIDLength || len(b) < idLen+fixed {
			return nil, errors.New("bad entry")
		}
		rc.id = string(b[:idLen])
		b = b[idLen:]
		rc.revision = binary.BigEndian.Uint32(b)
		rc.cost = int64(binary.BigEndian.Uint64(b[4:]))
		rc.at = int64(binary.BigEndian.Uint64(b[12:]))
		b = b[20:]
		if !v1 {
			rc.leaseAt = int64(binary.BigEndian.Uint64(b))
			b = b[8:]
		}
		copy(rc.subject[:], b[:32])
		copy(rc.tag[:], b[32:40])
		b = b[40:]
		if rc.cost < 1 && !(rc.cost == 0 && rc.kind == kindSettle) {
			return nil, errors.New("bad cost")
		}
		recs = append(recs, rc)
	}
	if len(b) != 0 {
		return nil, errors.New("trailing bytes")
	}
	return recs, nil
}
