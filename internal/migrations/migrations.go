// Package migrations reads the numbered SQL migrations that batchkit's
// stores embed: files named NNN_<name>.sql in one directory, numbered from
// 001 without a gap: a missing number is a missing file. Each store applies
// every migration whose version it has not recorded, in version order.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Migration is one migration file.
type Migration struct {
	Version int    // its number
	Name    string // the file name without ".sql", as "002_one_write_per_target"
	SQL     string // its text
}

// Load returns the migrations in dir of fsys in version order, or an error
// naming a file that breaks the naming rule: a name that does not start
// with a number and "_", or a number other than the one after the one
// before (001 first).
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql")) // sorted
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		switch {
		case !ok || err != nil:
			return nil, fmt.Errorf("migration %s: name must be NNN_<name>.sql", base)
		case v != len(out)+1:
			return nil, fmt.Errorf("migration %s: name must be %03d_<name>.sql", base, len(out)+1)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(base, ".sql"), SQL: string(b)})
	}
	return out, nil
}
