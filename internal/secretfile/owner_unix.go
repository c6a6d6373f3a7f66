//go:build unix

package admin

import (
	"io/fs"
	"syscall"
)

// fileOwner is the owner of the file fi describes.
func fileOwner(fi fs.FileInfo) tokenFileOwner {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return tokenFileOwner{}
	}
	return tokenFileOwner{uid: int(st.Uid), gid: int(st.Gid), known: true}
}
