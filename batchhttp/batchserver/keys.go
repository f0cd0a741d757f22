package batchserver

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

// MinSecretBytes is the shortest secret [ParseKey] accepts: 16 bytes, the
// length of 128 random bits in hex ("openssl rand -hex 16" writes 32).
//
// The minimum is ParseKey's, and so that of [ParseKeys], [ReadKeyFile] and
// [ReadSecretFile]: they read the secrets an operator writes by hand,
// where "s3cret" happens. [NewKeyAuth] takes keys a program built and
// leaves their strength to it (tests use short ones).
const MinSecretBytes = 16

// ParseKey parses one key spec, NAME=SECRET or NAME=SECRET:restricted (see
// [Key]). A secret shorter than [MinSecretBytes] is refused. An error
// names the key but never repeats its secret.
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
	if err := checkSecretLength(k.Secret); err != nil {
		return Key{}, fmt.Errorf("key of %q: %w", name, err)
	}
	return k, nil
}

// checkSecretLength refuses a secret shorter than MinSecretBytes.
func checkSecretLength(secret string) error {
	if len(secret) < MinSecretBytes {
		return fmt.Errorf("secret shorter than %d bytes (make one with: openssl rand -hex 16)", MinSecretBytes)
	}
	return nil
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
	if err := checkPrivate(name, fi, "the keys"); err != nil {
		return nil, err
	}
	keys, err := ParseKeys(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return keys, nil
}

// ReadSecretFile reads one secret (a metrics key, a webhook signing
// secret) from a file: its one line, without the white space around it.
// Like [ReadKeyFile], it refuses a file its group or other users can read
// or write (chmod 600 it), and a secret shorter than [MinSecretBytes]. An
// error starts with the file's name and never holds the secret.
func ReadSecretFile(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if err := checkPrivate(name, fi, "the secret"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", err
	}
	secret := strings.TrimSpace(string(b))
	switch {
	case secret == "":
		return "", fmt.Errorf("%s is empty", name)
	case strings.ContainsAny(secret, "\r\n"):
		return "", fmt.Errorf("%s: want one line, the secret", name)
	}
	if err := checkSecretLength(secret); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return secret, nil
}

// checkPrivate refuses a secrets file that is not a regular file readable
// by its owner only; what says what it holds.
func checkPrivate(name string, fi fs.FileInfo, what string) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", name)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s: permissions %04o are too open: other users could read %s; chmod 600 %s", name, perm, what, name)
	}
	return nil
}
