package coreutils

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// utilCat is cat [-n] [-b] [-A|-E] [FILE...].
func utilCat(c *Cmd, args []string) int {
	o, err := getopt(args, "nbuAEsTv", false)
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	files := o.args
	if len(files) == 0 {
		files = []string{"-"}
	}
	number := o.has('n') || o.has('b')
	status := 0
	line := 0
	for _, f := range files {
		r, err := c.open(f)
		if err != nil {
			c.Errorf("%s: %s", f, ErrText(err))
			status = 1
			continue
		}
		if !number && !o.has('A') && !o.has('E') {
			if _, err := io.Copy(c.Out(), r); err != nil {
				if c.Ctx.Err() != nil {
					return 1
				}
				if isWriteErr(err) {
					return writeError(err)
				}
				c.Errorf("%s: %v", f, err)
				status = 1
			}
			continue
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return 1
		}
		lines, nl := readLines(data)
		var b strings.Builder
		for i, l := range lines {
			if number && !(o.has('b') && l == "") {
				line++
				fmt.Fprintf(&b, "%6d\t", line)
			}
			b.WriteString(l)
			if i < len(lines)-1 || nl {
				if o.has('A') || o.has('E') {
					b.WriteByte('$')
				}
				b.WriteByte('\n')
			}
		}
		if _, err := io.WriteString(c.Out(), b.String()); err != nil {
			return writeError(err)
		}
	}
	return status
}

// isWriteErr reports whether an io.Copy error came from the writer side (a closed pipe).
func isWriteErr(err error) bool {
	return writeError(err) != 1
}

func modeString(fi *FileInfo) string {
	var b [10]byte
	switch fi.kind() {
	case kindDir:
		b[0] = 'd'
	case kindSymlink:
		b[0] = 'l'
	case kindDevice:
		b[0] = 'c'
	default:
		b[0] = '-'
	}
	perm := fi.Perm
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if perm&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	special := func(idx int, bit uint32, set, unset byte) {
		if perm&bit != 0 {
			if b[idx] == 'x' {
				b[idx] = set
			} else {
				b[idx] = unset
			}
		}
	}
	special(3, 0o4000, 's', 'S')
	special(6, 0o2000, 's', 'S')
	special(9, 0o1000, 't', 'T')
	return string(b[:])
}

func humanSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10)
	}
	f := float64(n)
	for _, unit := range []string{"K", "M", "G", "T", "P"} {
		f /= 1024
		if f < 1024 {
			if f < 10 {
				return strconv.FormatFloat(ceilTenth(f), 'f', 1, 64) + unit
			}
			return strconv.FormatFloat(float64(int64(f+0.999)), 'f', 0, 64) + unit
		}
	}
	return strconv.FormatFloat(f, 'f', 0, 64) + "E"
}

func ceilTenth(f float64) float64 {
	return float64(int64(f*10+0.999)) / 10
}

type lsEntry struct {
	name string // as displayed
	path string // for stat
	info *FileInfo
}

// utilLs is ls [-a] [-A] [-l] [-1] [-R] [-d] [-h] [-t] [-S] [-r] [-F] [-p] [-L] [FILE...].
func utilLs(c *Cmd, args []string) int {
	o, err := getopt(args, "aAl1RdhtSrFpLCgoinU", false, "color")
	if err != nil {
		return c.Usage(2, "%v", err)
	}
	long := o.has('l') || o.has('g') || o.has('o') || o.has('n')
	operands := o.args
	if len(operands) == 0 {
		operands = []string{"."}
	}
	status := 0
	var files []lsEntry
	var dirs []lsEntry
	for _, a := range operands {
		p := c.Abs(a)
		fi, err := c.FS.Stat(p, false)
		if err != nil {
			c.Errorf("cannot access '%s': %s", a, ErrText(err))
			status = 2
			continue
		}
		if fi.kind() == kindSymlink && (o.has('L') || (!long && !o.has('d') && !o.has('F'))) {
			if t, err := c.FS.Stat(p, true); err == nil {
				if o.has('L') || t.IsDir() {
					fi = t
				}
			}
		}
		e := lsEntry{name: a, path: p, info: fi}
		if fi.IsDir() && !o.has('d') {
			dirs = append(dirs, e)
		} else {
			files = append(files, e)
		}
	}
	w := &strings.Builder{}
	lsSort(files, o)
	lsSort(dirs, o)
	if len(files) > 0 {
		lsPrint(w, files, o, long, false)
	}
	header := len(operands) > 1 || o.has('R')
	first := len(files) == 0
	var listDir func(e lsEntry) bool
	listDir = func(e lsEntry) bool {
		if c.Ctx.Err() != nil {
			return false
		}
		entries, err := c.FS.ReadDir(e.path)
		if err != nil {
			c.Errorf("cannot open directory '%s': %s", e.name, ErrText(err))
			status = 2
			return true
		}
		if !first {
			w.WriteString("\n")
		}
		first = false
		if header {
			fmt.Fprintf(w, "%s:\n", e.name)
		}
		var list []lsEntry
		if o.has('a') {
			self, _ := c.FS.Stat(e.path, true)
			parent, err := c.FS.Stat(e.path+"/..", true)
			if err != nil {
				parent = self
			}
			list = append(list, lsEntry{name: ".", info: self}, lsEntry{name: "..", info: parent})
		}
		for _, fi := range entries {
			if strings.HasPrefix(fi.Name, ".") && !o.has('a') && !o.has('A') {
				continue
			}
			list = append(list, lsEntry{name: fi.Name, path: joinPath(e.path, fi.Name), info: fi})
		}
		lsSort(list, o)
		lsPrint(w, list, o, long, true)
		if _, err := io.WriteString(c.Out(), w.String()); err != nil {
			status = writeError(err)
			return false
		}
		w.Reset()
		if o.has('R') {
			for _, sub := range list {
				if sub.info.IsDir() && sub.name != "." && sub.name != ".." {
					sub.name = joinPath(e.name, sub.name)
					if !listDir(sub) {
						return false
					}
				}
			}
		}
		return true
	}
	for _, d := range dirs {
		if !listDir(d) {
			break
		}
	}
	if _, err := io.WriteString(c.Out(), w.String()); err != nil {
		return writeError(err)
	}
	return status
}

func joinPath(dir, name string) string {
	if strings.HasSuffix(dir, "/") {
		return dir + name
	}
	return dir + "/" + name
}

func lsSort(list []lsEntry, o *opts) {
	if o.has('U') {
		return
	}
	slices.SortStableFunc(list, func(a, b lsEntry) int {
		switch {
		case o.has('t'):
			if c := b.info.ModTime.Compare(a.info.ModTime); c != 0 {
				return c
			}
		case o.has('S'):
			if a.info.Size != b.info.Size {
				if a.info.Size > b.info.Size {
					return -1
				}
				return 1
			}
		}
		return strings.Compare(a.name, b.name)
	})
	if o.has('r') {
		slices.Reverse(list)
	}
}

func lsSuffix(fi *FileInfo, o *opts) string {
	switch {
	case fi.IsDir() && (o.has('F') || o.has('p')):
		return "/"
	case o.has('F') && fi.kind() == kindSymlink:
		return "@"
	case o.has('F') && fi.kind() == kindFile && fi.Mode.Perm()&0o111 != 0:
		return "*"
	}
	return ""
}

func lsPrint(w *strings.Builder, list []lsEntry, o *opts, long, total bool) {
	if !long {
		for _, e := range list {
			w.WriteString(e.name + lsSuffix(e.info, o) + "\n")
		}
		return
	}
	if total {
		var blocks int64
		for _, e := range list {
			blocks += diskBlocks(e.info)
		}
		fmt.Fprintf(w, "total %d\n", blocks)
	}
	sizeW, linkW := 1, 1
	sizes := make([]string, len(list))
	for i, e := range list {
		if o.has('h') {
			sizes[i] = humanSize(e.info.Size)
		} else {
			sizes[i] = strconv.FormatInt(e.info.Size, 10)
		}
		sizeW = max(sizeW, len(sizes[i]))
		linkW = max(linkW, len(strconv.Itoa(e.info.Nlink)))
	}
	for i, e := range list {
		owner := "root root "
		switch {
		case o.has('n'):
			owner = "0 0 "
		case o.has('g') && o.has('o'):
			owner = ""
		case o.has('g') || o.has('o'):
			owner = "root "
		}
		fmt.Fprintf(w, "%s %*d %s%*s %s %s%s", modeString(e.info), linkW, e.info.Nlink, owner, sizeW, sizes[i],
			lsTime(e.info.ModTime), e.name, lsSuffix(e.info, o))
		if e.info.kind() == kindSymlink {
			w.WriteString(" -> " + e.info.Target)
		}
		w.WriteString("\n")
	}
}

// diskBlocks is the space a file takes in 1 KiB blocks, with 4 KiB allocation units.
func diskBlocks(fi *FileInfo) int64 {
	switch fi.kind() {
	case kindDir:
		return 4
	case kindFile:
		return (fi.Size + 4095) / 4096 * 4
	}
	return 0
}

func lsTime(t time.Time) string {
	t = t.UTC()
	if time.Since(t) > 182*24*time.Hour || t.After(time.Now().Add(time.Hour)) {
		return t.Format("Jan _2  2006")
	}
	return t.Format("Jan _2 15:04")
}

// The bits each letter of a symbolic mode selects: whoBits for whom ("ugoa"), permBits for
// what ("rwxXst"). X is x for a directory or a file with an x bit set (permBitsX), else
// nothing.
var (
	whoBits   = map[byte]uint32{'u': 0o4700, 'g': 0o2070, 'o': 0o1007, 'a': 0o7777}
	permBits  = map[byte]uint32{'r': 0o444, 'w': 0o222, 'x': 0o111, 'X': 0, 's': 0o6000, 't': 0o1000}
	permBitsX = map[byte]uint32{'r': 0o444, 'w': 0o222, 'x': 0o111, 'X': 0o111, 's': 0o6000, 't': 0o1000}
)

// modeLetters reads the letters of s from i on that bits names, and returns their bits
// together and the index of the first letter it does not name.
func modeLetters(s string, i int, bits map[byte]uint32) (uint32, int) {
	var m uint32
	for ; i < len(s); i++ {
		b, ok := bits[s[i]]
		if !ok {
			break
		}
		m |= b
	}
	return m, i
}

// parseMode parses an octal mode, or a symbolic one ([ugoa]*[+-=][rwxXst]*, comma-separated)
// applied to cur.
func parseMode(s string, cur uint32, isDir bool) (uint32, bool) {
	if s == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(s, 8, 32); err == nil {
		if n > 0o7777 {
			return 0, false
		}
		return uint32(n), true
	}
	mode := cur
	for _, clause := range strings.Split(s, ",") {
		who, i := modeLetters(clause, 0, whoBits)
		if who == 0 {
			who = 0o7777 &^ 0o022 // as with umask 022
			who |= 0o0022 &^ 0o022
		}
		if i == len(clause) {
			return 0, false
		}
		for i < len(clause) {
			op := clause[i]
			if op != '+' && op != '-' && op != '=' {
				return 0, false
			}
			perms := permBits
			if isDir || mode&0o111 != 0 {
				perms = permBitsX
			}
			var bits uint32
			bits, i = modeLetters(clause, i+1, perms)
			bits &= who
			switch op {
			case '+':
				mode |= bits
			case '-':
				mode &^= bits
			case '=':
				mode = mode&^(who&0o777) | bits
			}
		}
	}
	return mode, true
}

// utilChmod is chmod [-R] [-v] MODE FILE....
func utilChmod(c *Cmd, args []string) int {
	recursive := false
	var rest []string
	for i, a := range args {
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if a == "-R" || a == "--recursive" {
			recursive = true
			continue
		}
		if a == "-v" || a == "-f" || a == "-c" {
			continue
		}
		rest = append(rest, a)
	}
	if len(rest) < 2 {
		return c.Usage(1, "missing operand")
	}
	modeArg, files := rest[0], rest[1:]
	status := 0
	apply := func(p, name string) bool {
		fi, err := c.FS.Stat(p, true)
		if err != nil {
			c.Errorf("cannot access '%s': %s", name, ErrText(err))
			return false
		}
		m, ok := parseMode(modeArg, fi.Perm, fi.IsDir())
		if !ok {
			c.Errorf("invalid mode: '%s'", modeArg)
			status = 1
			return false
		}
		if err := c.FS.Chmod(p, m); err != nil {
			c.Errorf("changing permissions of '%s': %s", name, ErrText(err))
			return false
		}
		return true
	}
	for _, f := range files {
		p := c.Abs(f)
		if !recursive {
			if !apply(p, f) {
				status = 1
			}
			continue
		}
		entries, err := c.FS.Walk(p, true)
		if err != nil {
			c.Errorf("cannot access '%s': %s", f, ErrText(err))
			status = 1
			continue
		}
		for _, e := range entries {
			if e.Info.kind() == kindSymlink {
				continue
			}
			if !apply(e.Path, e.Path) {
				status = 1
			}
		}
	}
	return status
}

// utilMkdir is mkdir [-p] [-m MODE] [-v] DIR....
func utilMkdir(c *Cmd, args []string) int {
	o, err := getopt(args, "pm:v", false, "mode")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	if len(o.args) == 0 {
		return c.Usage(1, "missing operand")
	}
	perm := uint32(0o755)
	if m, ok := o.val('m'); ok {
		if perm, ok = parseMode(m, 0o777&^0o022, true); !ok {
			return c.Usage(1, "invalid mode '%s'", m)
		}
	}
	status := 0
	for _, d := range o.args {
		p := c.Abs(d)
		if o.has('p') || o.hasLong("parents") {
			err = c.FS.MkdirAll(p, 0o755)
			if err == nil {
				_ = c.FS.Chmod(p, perm)
			}
		} else {
			err = c.FS.Mkdir(p, perm)
		}
		if err != nil {
			c.Errorf("cannot create directory '%s': %s", d, ErrText(err))
			status = 1
			continue
		}
		if o.has('v') {
			fmt.Fprintf(c.Out(), "mkdir: created directory '%s'\n", d)
		}
	}
	return status
}

// utilRm is rm [-r|-R] [-f] [-d] [-v] FILE....
func utilRm(c *Cmd, args []string) int {
	o, err := getopt(args, "rRfdvi", false, "recursive", "force", "no-preserve-root")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	recursive := o.has('r') || o.has('R') || o.hasLong("recursive")
	force := o.has('f') || o.hasLong("force")
	if len(o.args) == 0 {
		if force {
			return 0
		}
		return c.Usage(1, "missing operand")
	}
	status := 0
	for _, f := range o.args {
		if base := path.Base(f); base == "." || base == ".." {
			c.Errorf("refusing to remove '.' or '..' directory: skipping '%s'", f)
			status = 1
			continue
		}
		p := c.Abs(f)
		fi, err := c.FS.Stat(p, false)
		if err != nil {
			if !force || !errors.Is(err, fs.ErrNotExist) {
				c.Errorf("cannot remove '%s': %s", f, ErrText(err))
				status = 1
			}
			continue
		}
		if fi.IsDir() {
			if real, _ := c.FS.RealPath(p, true); real == "/" && !o.hasLong("no-preserve-root") {
				c.Errorf("it is dangerous to operate recursively on '/'")
				c.Errorf("use --no-preserve-root to override this failsafe")
				status = 1
				continue
			}
			switch {
			case recursive:
				err = c.FS.RemoveAll(p)
			case o.has('d'):
				err = c.FS.Remove(p)
			default:
				err = pathErr("remove", f, errIsDir)
			}
		} else {
			err = c.FS.Remove(p)
		}
		if err != nil {
			c.Errorf("cannot remove '%s': %s", f, ErrText(err))
			status = 1
			continue
		}
		if o.has('v') {
			fmt.Fprintf(c.Out(), "removed '%s'\n", f)
		}
	}
	return status
}

// utilRmdir is rmdir [-p] DIR....
func utilRmdir(c *Cmd, args []string) int {
	o, err := getopt(args, "pv", false)
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	if len(o.args) == 0 {
		return c.Usage(1, "missing operand")
	}
	status := 0
	for _, d := range o.args {
		targets := []string{d}
		if o.has('p') || o.hasLong("parents") {
			for p := path.Dir(strings.TrimRight(d, "/")); p != "." && p != "/"; p = path.Dir(p) {
				targets = append(targets, p)
			}
		}
		for _, t := range targets {
			p := c.Abs(t)
			fi, err := c.FS.Stat(p, false)
			if err == nil && !fi.IsDir() {
				err = pathErr("rmdir", t, errNotDir)
			}
			if err == nil {
				err = c.FS.Remove(p)
			}
			if err != nil {
				if !(o.hasLong("ignore-fail-on-non-empty") && errors.Is(err, syscall.ENOTEMPTY)) {
					c.Errorf("failed to remove '%s': %s", t, ErrText(err))
					status = 1
				}
				break
			}
		}
	}
	return status
}

// destInDir returns where src goes given dest: into dest when it is a directory (unless
// noTarget).
func (c *Cmd) destFor(src, dest string, noTarget bool) string {
	if noTarget {
		return c.Abs(dest)
	}
	if fi, err := c.FS.Stat(c.Abs(dest), true); err == nil && fi.IsDir() {
		return joinPath(c.Abs(dest), path.Base(strings.TrimRight(src, "/")))
	}
	return c.Abs(dest)
}

// utilMv is mv [-f] [-n] [-v] [-T] SOURCE... DEST.
func utilMv(c *Cmd, args []string) int {
	o, err := getopt(args, "fnviTu", false, "force", "no-clobber")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	if len(o.args) < 2 {
		return c.Usage(1, "missing destination file operand")
	}
	srcs, dest := o.args[:len(o.args)-1], o.args[len(o.args)-1]
	if len(srcs) > 1 {
		if fi, err := c.FS.Stat(c.Abs(dest), true); err != nil || !fi.IsDir() {
			return c.Usage(1, "target '%s' is not a directory", dest)
		}
	}
	status := 0
	for _, s := range srcs {
		sp := c.Abs(s)
		sfi, err := c.FS.Stat(sp, false)
		if err != nil {
			c.Errorf("cannot stat '%s': %s", s, ErrText(err))
			status = 1
			continue
		}
		dp := c.destFor(s, dest, o.has('T'))
		if dfi, err := c.FS.Stat(dp, false); err == nil {
			if o.has('n') || o.hasLong("no-clobber") {
				continue
			}
			if dfi.IsDir() && !sfi.IsDir() {
				c.Errorf("cannot overwrite directory '%s' with non-directory", dp)
				status = 1
				continue
			}
		}
		srcReal, _ := c.FS.RealPath(sp, false)
		dstReal, _ := c.FS.RealPath(dp, false)
		if sfi.IsDir() && dstReal != "" && strings.HasPrefix(dstReal, srcReal+"/") {
			c.Errorf("cannot move '%s' to a subdirectory of itself, '%s'", s, dp)
			status = 1
			continue
		}
		if err := c.FS.Rename(sp, dp); err != nil {
			c.Errorf("cannot move '%s' to '%s': %s", s, dest, ErrText(err))
			status = 1
			continue
		}
		if o.has('v') {
			fmt.Fprintf(c.Out(), "renamed '%s' -> '%s'\n", s, dp)
		}
	}
	return status
}

// utilTouch is touch [-c] [-d DATE] [-r FILE] FILE....
func utilTouch(c *Cmd, args []string) int {
	o, err := getopt(args, "cd:r:amt:h", false, "no-create", "date", "reference")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	t := time.Now()
	if d, ok := o.val('d'); ok {
		if t, ok = parseDate(d); !ok {
			return c.Usage(1, "invalid date format '%s'", d)
		}
	}
	if d, ok := o.longVal("date"); ok {
		if t, ok = parseDate(d); !ok {
			return c.Usage(1, "invalid date format '%s'", d)
		}
	}
	if r, ok := o.val('r'); ok {
		fi, err := c.FS.Stat(c.Abs(r), true)
		if err != nil {
			c.Errorf("failed to get attributes of '%s': %s", r, ErrText(err))
			return 1
		}
		t = fi.ModTime
	}
	if ts, ok := o.val('t'); ok {
		pt, err := time.Parse("200601021504", ts)
		if err != nil {
			return c.Usage(1, "invalid date format '%s'", ts)
		}
		t = pt
	}
	if len(o.args) == 0 {
		return c.Usage(1, "missing file operand")
	}
	status := 0
	for _, f := range o.args {
		p := c.Abs(f)
		if _, err := c.FS.Stat(p, true); errors.Is(err, fs.ErrNotExist) {
			if o.has('c') || o.hasLong("no-create") {
				continue
			}
			h, err := c.FS.Open(p, os.O_WRONLY|os.O_CREATE, 0o644)
			if err != nil {
				c.Errorf("cannot touch '%s': %s", f, ErrText(err))
				status = 1
				continue
			}
			h.Close()
		}
		if err := c.FS.Chtimes(p, t); err != nil {
			c.Errorf("cannot touch '%s': %s", f, ErrText(err))
			status = 1
		}
	}
	return status
}

func fileTypeName(fi *FileInfo) string {
	switch fi.kind() {
	case kindDir:
		return "directory"
	case kindSymlink:
		return "symbolic link"
	case kindDevice:
		return "character special file"
	}
	if fi.Size == 0 {
		return "regular empty file"
	}
	return "regular file"
}

// utilStat is stat [-L] [-c FORMAT | --format=FORMAT | --printf=FORMAT] FILE....
func utilStat(c *Cmd, args []string) int {
	o, err := getopt(args, "Lc:tf", false, "format", "printf", "dereference")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	format, hasFormat := o.val('c')
	if f, ok := o.longVal("format"); ok {
		format, hasFormat = f, true
	}
	printf, isPrintf := o.longVal("printf")
	if len(o.args) == 0 {
		return c.Usage(1, "missing operand")
	}
	status := 0
	for _, f := range o.args {
		fi, err := c.FS.Stat(c.Abs(f), o.has('L') || o.hasLong("dereference"))
		if err != nil {
			c.Errorf("cannot statx '%s': %s", f, ErrText(err))
			status = 1
			continue
		}
		switch {
		case isPrintf:
			io.WriteString(c.Out(), statFormat(unescape(printf), f, fi))
		case hasFormat:
			io.WriteString(c.Out(), statFormat(format, f, fi)+"\n")
		default:
			name := f
			if fi.kind() == kindSymlink {
				name += " -> " + fi.Target
			}
			fmt.Fprintf(c.Out(), "  File: %s\n  Size: %-10d\tBlocks: %-10d IO Block: 4096   %s\n", name, fi.Size, diskBlocks(fi)*2, fileTypeName(fi))
			fmt.Fprintf(c.Out(), "Device: 0h/0d\tInode: 0           Links: %d\n", fi.Nlink)
			fmt.Fprintf(c.Out(), "Access: (%04o/%s)  Uid: (    0/    root)   Gid: (    0/    root)\n", fi.Perm, modeString(fi))
			ts := fi.ModTime.UTC().Format("2006-01-02 15:04:05.000000000 -0700")
			fmt.Fprintf(c.Out(), "Access: %s\nModify: %s\nChange: %s\n Birth: -\n", ts, ts, ts)
		}
	}
	return status
}

func statFormat(format, name string, fi *FileInfo) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'n':
			b.WriteString(name)
		case 'N':
			b.WriteString("'" + name + "'")
			if fi.kind() == kindSymlink {
				b.WriteString(" -> '" + fi.Target + "'")
			}
		case 's':
			b.WriteString(strconv.FormatInt(fi.Size, 10))
		case 'a':
			b.WriteString(strconv.FormatUint(uint64(fi.Perm), 8))
		case 'A':
			b.WriteString(modeString(fi))
		case 'F':
			b.WriteString(fileTypeName(fi))
		case 'f':
			b.WriteString(strconv.FormatUint(uint64(rawMode(fi)), 16))
		case 'U', 'G':
			b.WriteString("root")
		case 'u', 'g', 'i', 'd', 'D':
			b.WriteString("0")
		case 'h':
			b.WriteString(strconv.Itoa(fi.Nlink))
		case 'b':
			b.WriteString(strconv.FormatInt(diskBlocks(fi)*2, 10))
		case 'B':
			b.WriteString("512")
		case 'o':
			b.WriteString("4096")
		case 'Y', 'X', 'Z', 'W':
			b.WriteString(strconv.FormatInt(fi.ModTime.Unix(), 10))
		case 'y', 'x', 'z', 'w':
			b.WriteString(fi.ModTime.UTC().Format("2006-01-02 15:04:05.000000000 -0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

func rawMode(fi *FileInfo) uint32 {
	m := fi.Perm
	switch fi.kind() {
	case kindDir:
		m |= 0o040000
	case kindSymlink:
		m |= 0o120000
	case kindDevice:
		m |= 0o020000
	default:
		m |= 0o100000
	}
	return m
}

// utilLn is ln [-s] [-f] [-n] [-T] [-v] TARGET [LINK] | TARGET... DIR.
func utilLn(c *Cmd, args []string) int {
	o, err := getopt(args, "sfnTvr", false, "symbolic", "force")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	symbolic := o.has('s') || o.hasLong("symbolic")
	if len(o.args) == 0 {
		return c.Usage(1, "missing file operand")
	}
	targets, link := o.args, "."
	if len(o.args) > 1 {
		targets, link = o.args[:len(o.args)-1], o.args[len(o.args)-1]
	}
	status := 0
	for _, t := range targets {
		dp := c.Abs(link)
		isDir := false
		if !o.has('T') {
			if fi, err := c.FS.Stat(dp, !o.has('n')); err == nil && fi.IsDir() {
				isDir = true
			}
		}
		if isDir {
			dp = joinPath(dp, path.Base(strings.TrimRight(t, "/")))
		} else if len(targets) > 1 {
			return c.Usage(1, "target '%s' is not a directory", link)
		}
		if o.has('f') || o.hasLong("force") {
			if fi, err := c.FS.Stat(dp, false); err == nil && !fi.IsDir() {
				_ = c.FS.Remove(dp)
			}
		}
		if symbolic {
			err = c.FS.Symlink(t, dp)
		} else {
			err = c.FS.Link(c.Abs(t), dp)
		}
		if err != nil {
			kind := "hard link"
			if symbolic {
				kind = "symbolic link"
			}
			c.Errorf("failed to create %s '%s': %s", kind, dp, ErrText(err))
			status = 1
		}
	}
	return status
}

func baseName(n, suffix string) string {
	if n == "" {
		return ""
	}
	t := strings.TrimRight(n, "/")
	if t == "" {
		return "/"
	}
	if i := strings.LastIndex(t, "/"); i >= 0 {
		t = t[i+1:]
	}
	if suffix != "" && t != suffix && strings.HasSuffix(t, suffix) {
		t = strings.TrimSuffix(t, suffix)
	}
	return t
}

func dirName(n string) string {
	t := strings.TrimRight(n, "/")
	if t == "" {
		if strings.HasPrefix(n, "/") {
			return "/"
		}
		return "."
	}
	i := strings.LastIndex(t, "/")
	if i < 0 {
		return "."
	}
	d := strings.TrimRight(t[:i], "/")
	if d == "" {
		return "/"
	}
	return d
}
