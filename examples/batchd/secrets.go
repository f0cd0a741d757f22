package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/examples/internal/daemon"
)

// loadMetricsKey returns the metrics key of -metrics-key-file (readable by
// its owner only), $BATCHD_METRICS_KEY or -metrics-key, in that order, or
// "" for none. A key shorter than batchserver.MinSecretBytes is refused.
func loadMetricsKey(o options) (string, error) {
	if o.metricsKeyFile != "" {
		k, err := batchserver.ReadSecretFile(o.metricsKeyFile)
		if err != nil {
			return "", fmt.Errorf("-metrics-key-file: %w", err)
		}
		return k, nil
	}
	from, k := "$"+metricsKeyEnv, strings.TrimSpace(os.Getenv(metricsKeyEnv))
	if k == "" {
		from, k = "-metrics-key", o.metricsKey
	}
	if k != "" && len(k) < batchserver.MinSecretBytes {
		return "", fmt.Errorf("%s: shorter than %d bytes (make one with: openssl rand -hex 16)", from, batchserver.MinSecretBytes)
	}
	return k, nil
}

// generatedFile is where a generated key or secret is written when stdout
// is not a terminal: -generated-file, or batchd-generated.env beside the
// SQLite database (in the working directory for PostgreSQL).
func generatedFile(o options) string {
	if o.generatedFile != "" {
		return o.generatedFile
	}
	if daemon.IsPostgresURL(o.db) {
		return "batchd-generated.env"
	}
	return filepath.Join(filepath.Dir(o.db), "batchd-generated.env")
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// writePrivate writes content to name, readable and writable by its owner
// only. It writes a new file (os.CreateTemp: O_EXCL, mode 0600) beside name
// and renames it over name, so that a symlink or a hard link planted at
// name is replaced, never followed: the secrets cannot be steered into a
// file another user chose, nor into one whose mode lets others read it.
func writePrivate(name, content string) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = io.WriteString(f, content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// showGenerated tells the operator the key (if generated is not "") and
// the webhook secret (if hookGenerated) batchd generated for this run. On
// a terminal it prints them once; otherwise stdout is likely a log that
// keeps them, so they go to a file only the owner can read, in the form
// of shell exports, and stdout gets the file's name.
func showGenerated(o options, stdout io.Writer, server, generated string, hookGenerated bool, hookSecret string) error {
	if generated == "" && !hookGenerated {
		return nil
	}
	if isTerminal(stdout) {
		if generated != "" {
			fmt.Fprintf(stdout, "batchd: no -key given, so here is a generated key for caller \"local\" (shown once):\n\n"+
				"    export BATCH_SERVER=%s BATCH_KEY=%s\n\n"+
				"batchd: pass your own keys in a file (-key-file, one NAME=SECRET[:restricted] per line) or in $"+keysEnv+"\n",
				server, generated)
		}
		if hookGenerated {
			fmt.Fprintf(stdout, "batchd: no webhook secret given, so the callers' webhook secrets are derived from this master secret for this run (shown once):\n\n"+
				"    %s\n\n"+
				"batchd: pass your own (whsec_ and base64 of 24-64 random bytes) in -webhook-secret-file or $"+webhookSecretEnv+
				"; batchd -print-webhook-secret NAME prints the secret caller NAME verifies its deliveries with\n",
				hookSecret)
		}
		return nil
	}
	var b strings.Builder
	name := generatedFile(o)
	fmt.Fprintf(&b, "# What batchd generated for its run; source it: . %s\n", name)
	if generated != "" {
		fmt.Fprintf(&b, "export BATCH_SERVER=%s BATCH_KEY=%s\n", server, generated)
	}
	if hookGenerated {
		fmt.Fprintf(&b, "export BATCHD_WEBHOOK_SECRET=%s\n", hookSecret)
	}
	if err := writePrivate(name, b.String()); err != nil {
		return fmt.Errorf("-generated-file: %w", err)
	}
	if generated != "" {
		fmt.Fprintf(stdout, "batchd: no -key given, so a key for caller \"local\" was generated and written to %s (mode 0600), with the server's address; "+
			"pass your own keys in a file (-key-file) or in $"+keysEnv+"\n", name)
	}
	if hookGenerated {
		fmt.Fprintf(stdout, "batchd: no webhook secret given, so the callers' webhook secrets are derived from a master secret generated for this run, written to %s (mode 0600); "+
			"pass your own in -webhook-secret-file or $"+webhookSecretEnv+"\n", name)
	}
	return nil
}
