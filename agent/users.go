//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// osUser is an account from the sandbox's /etc/passwd.
type osUser struct {
	Name   string
	UID    uint32
	GID    uint32
	Home   string
	Groups []uint32 // supplementary groups from /etc/group, primary group first
}

// userDB reads /etc/passwd and /etc/group itself (no cgo, no NSS) and caches
// them until either file changes.
type userDB struct {
	passwdPath, groupPath string

	mu        sync.Mutex
	stamp     [2]time.Time
	sizes     [2]int64
	users     map[string]*osUser
	uidNames  map[uint32]string
	gidNames  map[uint32]string
	loadedErr error
}

func newUserDB(etc string) *userDB {
	return &userDB{passwdPath: etc + "/passwd", groupPath: etc + "/group"}
}

const maxEtcFile = 16 << 20

func (db *userDB) refresh() {
	var stamp [2]time.Time
	var sizes [2]int64
	for i, p := range []string{db.passwdPath, db.groupPath} {
		if fi, err := os.Stat(p); err == nil {
			stamp[i], sizes[i] = fi.ModTime(), fi.Size()
		}
	}
	if db.users != nil && stamp == db.stamp && sizes == db.sizes {
		return
	}
	db.stamp, db.sizes = stamp, sizes
	db.users = map[string]*osUser{}
	db.uidNames = map[uint32]string{}
	db.gidNames = map[uint32]string{}
	db.loadedErr = nil
	passwd, err := readSmall(db.passwdPath)
	if err != nil {
		db.loadedErr = err
	}
	group, _ := readSmall(db.groupPath)
	members := map[string][]uint32{}
	eachRecord(group, func(f []string) {
		if len(f) < 4 {
			return
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return
		}
		if _, ok := db.gidNames[uint32(gid)]; !ok {
			db.gidNames[uint32(gid)] = f[0]
		}
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members[m] = append(members[m], uint32(gid))
			}
		}
	})
	eachRecord(passwd, func(f []string) {
		if len(f) < 7 {
			return
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil || f[0] == "" {
			return
		}
		if _, dup := db.users[f[0]]; dup {
			return
		}
		u := &osUser{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: f[5]}
		if u.Home == "" {
			u.Home = "/"
		}
		u.Groups = append(u.Groups, u.GID)
		for _, g := range members[u.Name] {
			if g != u.GID {
				u.Groups = append(u.Groups, g)
			}
		}
		db.users[u.Name] = u
		if _, ok := db.uidNames[u.UID]; !ok {
			db.uidNames[u.UID] = u.Name
		}
	})
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(&limitedReader{f, maxEtcFile}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type limitedReader struct {
	f *os.File
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("file too large")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

func eachRecord(b []byte, fn func([]string)) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fn(strings.Split(line, ":"))
	}
}

// lookup returns the named user.
func (db *userDB) lookup(name string) (*osUser, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refresh()
	if u, ok := db.users[name]; ok {
		return u, nil
	}
	// A uid, or uid:gid, that passwd does not name is that id, as a Dockerfile's USER 1000
	// is: its group the given gid, else the uid's number.
	if uidS, gidS, hasGID := strings.Cut(name, ":"); uidS != "" {
		if uid, err := strconv.ParseUint(uidS, 10, 32); err == nil {
			gid := uid
			if hasGID {
				if gid, err = strconv.ParseUint(gidS, 10, 32); err != nil {
					return nil, fmt.Errorf("user %q: the group is not a number", name)
				}
			}
			if n, ok := db.uidNames[uint32(uid)]; ok && !hasGID {
				u := *db.users[n] // the account of that uid, asked for by number
				u.Name = name
				return &u, nil
			}
			return &osUser{Name: name, UID: uint32(uid), GID: uint32(gid), Home: "/", Groups: []uint32{uint32(gid)}}, nil
		}
	}
	if db.loadedErr != nil {
		return nil, fmt.Errorf("user %q: %v", name, db.loadedErr)
	}
	return nil, fmt.Errorf("user %q not found in %s", name, db.passwdPath)
}

// byUID returns the first user with uid, or a synthetic one named by number.
func (db *userDB) byUID(uid uint32) *osUser {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refresh()
	if name, ok := db.uidNames[uid]; ok {
		return db.users[name]
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = "/"
	}
	return &osUser{Name: strconv.FormatUint(uint64(uid), 10), UID: uid, GID: uint32(os.Getegid()), Home: home, Groups: []uint32{uint32(os.Getegid())}}
}

// names returns the user and group names for uid and gid, numbers when unknown.
func (db *userDB) names(uid, gid uint32) (string, string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refresh()
	owner, ok := db.uidNames[uid]
	if !ok {
		owner = strconv.FormatUint(uint64(uid), 10)
	}
	group, ok := db.gidNames[gid]
	if !ok {
		group = strconv.FormatUint(uint64(gid), 10)
	}
	return owner, group
}
