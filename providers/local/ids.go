//go:build linux

package local

import "crypto/rand"

// idLen is the length of a sandbox id: lowercase letters and digits only, as E2B clients
// require (^[a-z0-9]+$).
const idLen = 20

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newID returns a random sandbox id (about 103 bits).
func newID() string {
	b := make([]byte, idLen)
	if _, err := rand.Read(b); err != nil {
		panic("local: crypto/rand: " + err.Error())
	}
	for i := range b {
		// 256 % 36 = 4: the bias is below 2% per character and irrelevant for an id.
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// validID reports whether id has the shape of a sandbox id, so it is safe in paths and argv.
func validID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
