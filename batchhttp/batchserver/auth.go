package batchserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// Key is one bearer key that [NewKeyAuth] accepts, and the caller it stands
// for.
type Key struct {
	// Name is the caller's name: it owns the jobs submitted with this key.
	// Several keys may share a name (e.g. while rotating a key). Required.
	Name string
	// Secret is the bearer token. Required, and unique among the keys.
	Secret string
	// Class is passed on as [batch.Caller].Class.
	Class string
	// Restricted is passed on as [batch.Caller].Restricted: no error
	// details of this caller's jobs reach a log line.
	Restricted bool
}

// NewKeyAuth returns a [batchhttp.CallerFunc] that accepts "Authorization: Bearer
// <secret>" for any of keys. It compares the presented token with every
// key's secret in constant time (over SHA-256 digests, so that neither the
// match nor a secret's length shows in the timing). A missing or unknown key
// is answered 401 with a WWW-Authenticate: Bearer challenge. It returns an
// error if a key has no name or secret, or two keys share a secret. It sets
// no minimum length: keys an operator writes go through [ParseKey] (or
// [ReadKeyFile]), which refuses one shorter than [MinSecretBytes].
func NewKeyAuth(keys []Key) (batchhttp.CallerFunc, error) {
	type entry struct {
		digest [sha256.Size]byte
		caller batch.Caller
	}
	entries := make([]entry, 0, len(keys))
	seen := make(map[[sha256.Size]byte]bool, len(keys))
	for i, k := range keys {
		if k.Name == "" || k.Secret == "" {
			return nil, fmt.Errorf("batchserver: key %d: name and secret are required", i)
		}
		d := sha256.Sum256([]byte(k.Secret))
		if seen[d] {
			return nil, fmt.Errorf("batchserver: key %d (%s): secret used by another key", i, k.Name)
		}
		seen[d] = true
		entries = append(entries, entry{d, batch.Caller{Name: k.Name, Class: k.Class, Restricted: k.Restricted}})
	}
	if len(entries) == 0 {
		return nil, errors.New("batchserver: no keys")
	}
	return func(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
		token, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="batch"`)
			batchhttp.WriteError(w, http.StatusUnauthorized, batchhttp.CodeUnauthorized, "unauthorized", "send Authorization: Bearer <key>")
			return batch.Caller{}, false
		}
		d := sha256.Sum256([]byte(token))
		found := -1
		for i := range entries {
			eq := subtle.ConstantTimeCompare(d[:], entries[i].digest[:])
			found = subtle.ConstantTimeSelect(eq, i, found)
		}
		if found < 0 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="batch", error="invalid_token"`)
			batchhttp.WriteError(w, http.StatusUnauthorized, batchhttp.CodeUnauthorized, "unauthorized", "")
			return batch.Caller{}, false
		}
		return entries[found].caller, true
	}, nil
}

// bearer returns the token of an "Authorization: Bearer <token>" header. The
// scheme is case-insensitive; exactly one header is accepted.
func bearer(r *http.Request) (string, bool) {
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(vs[0], " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}
