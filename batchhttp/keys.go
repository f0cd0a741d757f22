package batchhttp

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// RestrictedSuffix marks a restricted caller in a key spec:
// NAME=SECRET:restricted.
const RestrictedSuffix = ":restricted"

// ParseKey parses one key spec, NAME=SECRET or NAME=SECRET:restricted (see
// [Key]). An error names the key but never repeats its secret.
func ParseKey(spec string) (Key, error) {
	name, secret, ok := strings.Cut(spec, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || secret == "" {
		return Key{}, fmt.Errorf("key %q: want NAME=SECRET or NAME=SECRET%s", redactKey(spec), RestrictedSuffix)
	}
	k := Key{Name: name, Secret: secret}
	if base, found := strings.CutSuffix(secret, RestrictedSuffix); found {
		if base == "" {
			return Key{}, fmt.Errorf("key of %q: empty secret", name)
		}
		k.Secret, k.Restricted = base, true
	}
	return k, nil
}

// redactKey keeps the name of a malformed key spec and hides the rest.
func redactKey(spec string) string {
	name, _, found := strings.Cut(spec, "=")
	if !found {
		return "…"
	}
	return name + "=…"
}

// ParseKeys reads keys, one [ParseKey] spec per line; blank lines and
// lines starting with "#" are skipped, and white space around a line is
// ignored. An error gives the line number, never a secret.
func ParseKeys(r io.Reader) ([]Key, error) {
	var keys []Key
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParseKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

// ReadKeyFile reads the keys of a file as [ParseKeys] does. Like ssh with a
// private key, it refuses a file that its group or other users can read or
// write (chmod 600 it): every key in it lets its holder act as a caller. An
// error starts with the file's name.
func ReadKeyFile(name string) ([]Key, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkPrivate(name, fi); err != nil {
		return nil, err
	}
	keys, err := ParseKeys(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return keys, nil
}

// checkPrivate refuses a secrets file that is not a regular file readable
// by its owner only.
func checkPrivate(name string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", name)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s: permissions %04o are too open: other users could read the keys; chmod 600 %s", name, perm, name)
	}
	return nil
}
