package batchserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKeys(t *testing.T) {
	t.Parallel()
	keys, err := ParseKeys(strings.NewReader("# callers\nalice=alice-secret-0001\n\n  agency=agency-secret-0001:restricted  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != (Key{Name: "alice", Secret: "alice-secret-0001"}) || keys[1] != (Key{Name: "agency", Secret: "agency-secret-0001", Restricted: true}) {
		t.Errorf("keys = %+v", keys)
	}
	f := func(in, wantErr string) {
		t.Helper()
		_, err := ParseKeys(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseKeys(%q) = %v, want an error with %q", in, err, wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseKeys(%q): the error %q repeats a secret", in, err)
		}
	}
	f("alice=alice-secret-0001\nbob hunter2\n", `line 2: key "…"`)
	f("alice=alice-secret-0001\n\n# c\n=hunter2\n", `line 4: key "=…"`)
	f("alice=alice-secret-0001\nbob=hunter2\n", `line 2: key of "bob": secret shorter than 16 bytes`)
	f("bob=hunter2:restricted\n", `line 1: key of "bob": secret shorter than 16 bytes`)
	f("carol=:restricted\n", `line 1: key of "carol": empty secret`)
	f("dave=\n", "line 1")
}

func TestReadKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("alice=alice-secret-0001\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if keys, err := ReadKeyFile(write("private", 0o600)); err != nil || len(keys) != 1 {
		t.Errorf("a 0600 file: %v, %v", keys, err)
	}
	if keys, err := ReadKeyFile(write("readonly", 0o400)); err != nil || len(keys) != 1 {
		t.Errorf("a 0400 file: %v, %v", keys, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660} {
		p := write("open", mode)
		if _, err := ReadKeyFile(p); err == nil || !strings.Contains(err.Error(), "too open") || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("a %04o file: %v, want it refused as too open", mode, err)
		}
	}
	if _, err := ReadKeyFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v", err)
	}
	p := filepath.Join(dir, "bad")
	if err := os.WriteFile(p, []byte("alice=alice-secret-0001\nbob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKeyFile(p); err == nil || !strings.HasPrefix(err.Error(), p+": line 2:") {
		t.Errorf("a bad line: %v, want the file and line 2", err)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	ok := func(in string, want Key) {
		t.Helper()
		got, err := ParseKey(in)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	ok("alice=alice-secret-0001", Key{Name: "alice", Secret: "alice-secret-0001"})
	ok("agency=0123456789abcdef:restricted", Key{Name: "agency", Secret: "0123456789abcdef", Restricted: true})
	ok("a=b=cdefghijklmnopq", Key{Name: "a", Secret: "b=cdefghijklmnopq"})
	// A secret shorter than MinSecretBytes.
	for _, bad := range []string{"", "alice", "=secret", "alice=", "alice=:restricted", "alice=s3cret", "a=0123456789abcde", "a=0123456789abcde:restricted"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

// ReadSecretFile reads one secret from a file only its owner can read,
// refusing an open file, an empty one, more than one line and a short
// secret, without repeating the secret.
func TestReadSecretFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if got, err := ReadSecretFile(write("ok", "  "+secret+"\n", 0o600)); err != nil || got != secret {
		t.Errorf("a 0600 file: %q, %v", got, err)
	}
	f := func(p, wantErr string) {
		t.Helper()
		_, err := ReadSecretFile(p)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ReadSecretFile(%s) = %v, want an error with %q", filepath.Base(p), err, wantErr)
		}
		if err != nil && (strings.Contains(err.Error(), "MfKQ9r8") || strings.Contains(err.Error(), "hunter2")) {
			t.Errorf("the error %q repeats the secret", err)
		}
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		f(write("open", secret, mode), "too open")
	}
	f(write("empty", "\n", 0o600), "is empty")
	f(write("lines", secret+"\n"+secret+"\n", 0o600), "want one line")
	f(write("short", "hunter2\n", 0o600), "shorter than 16 bytes")
	f(dir, "not a regular file")
	if _, err := ReadSecretFile(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v", err)
	}
}
