package options

import (
	"flag"
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/journal"
)

// DefaultJournalMaxEntries is --journal-max-entries' default.
const DefaultJournalMaxEntries = journal.DefaultMaxEntries

// journalOptions are the flags of the charge journal (part of Options):
// the charges and lease releases the Redis store could not record, applied
// when it answers again (pkg/limiter/journal).
type journalOptions struct {
	JournalMaxEntries int
	JournalFile       string
}

// journalFlags adds the journal's flags to fs.
func journalFlags(fs *flag.FlagSet, o *journalOptions) {
	fs.IntVar(&o.JournalMaxEntries, "journal-max-entries", DefaultJournalMaxEntries, fmt.Sprintf("--store redis: the most charges and lease releases that Redis could not record this replica holds, to apply when Redis answers again (at most %d bytes each; more are dropped and counted); 1–%d", journal.MaxBytesPerEntry, journal.MaxMaxEntries))
	fs.StringVar(&o.JournalFile, "journal-file", "", "--store redis: the file, of this replica alone, where a graceful stop writes the charges and releases it could not apply, read back and applied at the next start (empty: they are lost at stop); its directory must be writable")
}

// journalAccepts says what each journal flag takes, as errors put it after
// "must be". Read only.
var journalAccepts = map[string]string{
	"journal-max-entries": fmt.Sprintf("an integer between 1 and %d", journal.MaxMaxEntries),
	"journal-file":        "empty with --store memory (the journal holds what Redis could not record)",
}

// check validates the journal's flags, one error per refused value.
func (o *journalOptions) check(given map[string]Given, store string) error {
	r := refusals{given: given, accepts: journalAccepts}
	r.check("journal-max-entries", o.JournalMaxEntries >= 1 && o.JournalMaxEntries <= journal.MaxMaxEntries)
	r.check("journal-file", o.JournalFile == "" || store != "memory")
	return r.err()
}

// JournalConfig is the journal's configuration of the flags; the caller
// sets the store, the clock and the observer.
func (o *journalOptions) JournalConfig() journal.Config {
	return journal.Config{MaxEntries: o.JournalMaxEntries, File: o.JournalFile}
}
