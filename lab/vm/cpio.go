package vm

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// cpioFile is one entry of an initramfs: a regular file (Data), a symlink
// (Link) or a directory (neither).
type cpioFile struct {
	Name string // path without a leading slash
	Mode uint32 // permission bits
	Data []byte
	Link string
	Dir  bool
}

// Type bits of a cpio mode (as stat's st_mode).
const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioLink = 0o120000
)

// writeCPIO writes files as a cpio archive in the "newc" format the kernel
// unpacks as an initramfs (Documentation/driver-api/early-userspace/
// buffer-format.rst), sorted by name so that every directory comes before
// what it holds, ending with the TRAILER!!! entry. Parent directories must
// be listed (the kernel does not create them).
func writeCPIO(w io.Writer, files []cpioFile) error {
	sorted := append([]cpioFile(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	ino := 1
	for _, f := range sorted {
		if f.Name == "" || strings.HasPrefix(f.Name, "/") {
			return fmt.Errorf("cpio: bad name %q", f.Name)
		}
		mode, data := f.Mode&0o7777, f.Data
		nlink := 1
		switch {
		case f.Dir:
			mode |= cpioDir
			nlink = 2
			data = nil
		case f.Link != "":
			mode |= cpioLink
			data = []byte(f.Link)
		default:
			mode |= cpioReg
		}
		if err := writeCPIOEntry(w, ino, mode, nlink, f.Name, data); err != nil {
			return err
		}
		ino++
	}
	return writeCPIOEntry(w, 0, 0, 1, "TRAILER!!!", nil)
}

func writeCPIOEntry(w io.Writer, ino int, mode uint32, nlink int, name string, data []byte) error {
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with its NUL), check.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+8)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("cpio: write %s: %w", name, err)
	}
	if len(data) == 0 {
		return nil
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("cpio: write %s: %w", name, err)
	}
	if n := len(data) % 4; n != 0 {
		if _, err := w.Write(make([]byte, 4-n)); err != nil {
			return fmt.Errorf("cpio: write %s: %w", name, err)
		}
	}
	return nil
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
