package pgdsn

import "testing"

func TestWithDatabase(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://postgres@/postgres?host=/tmp/s&sslmode=disable", "postgres://postgres@/t1?host=/tmp/s&sslmode=disable"},
		{"postgresql://u:p@h:5432/db", "postgresql://u:p@h:5432/t1"},
		{"host=/tmp/s user=postgres dbname=postgres", "host=/tmp/s user=postgres dbname=postgres dbname=t1"},
	} {
		if got, err := WithDatabase(c.in, "t1"); err != nil || got != c.want {
			t.Errorf("WithDatabase(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := WithDatabase("postgres://%zz", "t1"); err == nil {
		t.Error("a malformed URL: no error")
	}
}
