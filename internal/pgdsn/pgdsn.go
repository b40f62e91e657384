// Package pgdsn rewrites PostgreSQL connection strings, for the tests and the benchmark that
// make a database of their own on a cluster they are given.
package pgdsn

import (
	"net/url"
	"strings"
)

// WithDatabase is dsn (a postgres:// or postgresql:// URL, or a keyword/value string) naming
// database name instead of its own.
func WithDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil // of a key given twice, the last value counts
}
