package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/siftfetch/batchkit/batchconsole"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// adminKeyEnv holds the operator console's key, as -admin-key-file does.
const adminKeyEnv = "BATCHD_ADMIN_KEY"

// loadAdminKey returns the operator key of -admin-key-file (which must be
// readable by its owner only) or $BATCHD_ADMIN_KEY, or "" for none: no
// console.
func loadAdminKey(o options) (string, error) {
	from, k := "$"+adminKeyEnv, strings.TrimSpace(os.Getenv(adminKeyEnv))
	if o.adminKeyFile != "" {
		s, err := batchserver.ReadSecretFile(o.adminKeyFile)
		if err != nil {
			return "", fmt.Errorf("-admin-key-file: %w", err)
		}
		from, k = "-admin-key-file", s
	}
	if k != "" && len(k) < batchconsole.MinKeyBytes {
		return "", fmt.Errorf("%s: shorter than %d bytes (make one with: openssl rand -hex 16)", from, batchconsole.MinKeyBytes)
	}
	return k, nil
}
