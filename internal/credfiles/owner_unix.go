//go:build unix

package credfiles

import (
	"io/fs"
	"syscall"
)

// fileOwner is the owner of the file fi describes.
func fileOwner(fi fs.FileInfo) owner {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return owner{}
	}
	return owner{uid: int(st.Uid), gid: int(st.Gid), known: true}
}
