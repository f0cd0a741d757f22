package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// The bounds of a job's labels: its metadata (see [SubmitOptions]) and its
// targets' custom ids (see [Target]).
const (
	// MaxMetadataPairs is how many key-value pairs a job's metadata holds
	// at most.
	MaxMetadataPairs = 16
	// MaxMetadataKeyBytes is the longest metadata key, in bytes.
	MaxMetadataKeyBytes = 64
	// MaxMetadataValueBytes is the longest metadata value, in bytes.
	MaxMetadataValueBytes = 512
	// MaxCustomIDBytes is the longest custom id of a target, in bytes.
	MaxCustomIDBytes = 64
)

// ErrInvalidMetadata: a submit whose metadata is over a bound or not
// valid UTF-8. The message names the bound, never a key or a value.
var ErrInvalidMetadata = errors.New("batch: invalid metadata")

// validateMetadata checks a job's metadata against the bounds. Its errors
// never repeat a key or a value.
func validateMetadata(m map[string]string) error {
	if len(m) > MaxMetadataPairs {
		return fmt.Errorf("%w: %d pairs (max %d)", ErrInvalidMetadata, len(m), MaxMetadataPairs)
	}
	for k, v := range m {
		switch {
		case k == "":
			return fmt.Errorf("%w: empty key", ErrInvalidMetadata)
		case len(k) > MaxMetadataKeyBytes:
			return fmt.Errorf("%w: a key of %d bytes (max %d)", ErrInvalidMetadata, len(k), MaxMetadataKeyBytes)
		case len(v) > MaxMetadataValueBytes:
			return fmt.Errorf("%w: a value of %d bytes (max %d)", ErrInvalidMetadata, len(v), MaxMetadataValueBytes)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fmt.Errorf("%w: not valid UTF-8", ErrInvalidMetadata)
		}
	}
	return nil
}

// customIDs checks the targets' custom ids and returns them, one per
// target, or nil when no target has one. A custom id is unique within the
// job; a duplicate is a *[TargetError] that names the two targets, not
// the id.
func customIDs(targets []Target) ([]string, error) {
	var ids []string
	seen := map[string]int{}
	for i, t := range targets {
		id := t.CustomID
		if id == "" {
			continue
		}
		switch {
		case len(id) > MaxCustomIDBytes:
			return nil, &TargetError{Index: i, Reason: fmt.Sprintf("custom_id of %d bytes (max %d)", len(id), MaxCustomIDBytes)}
		case !utf8.ValidString(id):
			return nil, &TargetError{Index: i, Reason: "custom_id is not valid UTF-8"}
		}
		if j, dup := seen[id]; dup {
			return nil, &TargetError{Index: i, Reason: fmt.Sprintf("duplicate custom_id: target %d has the same (custom ids are unique within a job)", j)}
		}
		seen[id] = i
		if ids == nil {
			ids = make([]string, len(targets))
		}
		ids[i] = id
	}
	return ids, nil
}

// labelsKey is the part of the idempotency key that the labels add: ""
// without any, so that a submit without labels keeps the key it always
// had; else the hex SHA-256 of the metadata's pairs in key order and the
// custom ids in idx order, each string length-prefixed.
func labelsKey(meta map[string]string, ids []string) string {
	if len(meta) == 0 && ids == nil {
		return ""
	}
	var b strings.Builder
	put := func(s string) { fmt.Fprintf(&b, "%d:%s", len(s), s) }
	b.WriteString("metadata")
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		put(k)
		put(meta[k])
	}
	b.WriteString("custom_ids")
	for _, id := range ids {
		put(id)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// withLabels is the idempotency key of a submit whose key without its
// labels is key: key itself without labels, else the hex SHA-256 of key,
// a NUL byte and the labels' part (see labelsKey). The labels are part of
// the request: the same list with other metadata or custom ids is
// another job, so that no submit silently gets labels it did not ask for.
func withLabels(key, labels string) string {
	if labels == "" {
		return key
	}
	sum := sha256.Sum256([]byte(key + "\x00labels\x00" + labels))
	return hex.EncodeToString(sum[:])
}
