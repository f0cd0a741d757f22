package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// WebhookTarget is one finished target in an [EventTargetFinished] event:
// its idx, its custom id ("" for none), its status (done or failed) and
// its outcome. It never carries the target's URL or result.
type WebhookTarget = batchdriver.WebhookTarget

// MaxEventTargets is the most targets one [EventTargetFinished] event
// carries; more that finished meanwhile go in the next.
const MaxEventTargets = batchdriver.MaxEventTargets

// webhookEvent is an event type a submit may name, with its bit of the
// stored set.
type webhookEvent struct {
	name string
	bit  batchdriver.HookEvents
}

// webhookEvents are the event types a submit may name.
var webhookEvents = []webhookEvent{
	{EventTargetFinished, batchdriver.HookTargets},
	{EventJobFinished, batchdriver.HookFinished},
}

// parseWebhookEvents returns the stored set of a submit's event types: 0
// for none given or the default ([EventJobFinished] alone), so that a
// default job is stored, keyed and shown as one without the option.
func parseWebhookEvents(webhookURL string, names []string) (batchdriver.HookEvents, error) {
	if len(names) == 0 {
		return 0, nil
	}
	if webhookURL == "" {
		return 0, fmt.Errorf("%w: events without a url", ErrInvalidWebhook)
	}
	var set batchdriver.HookEvents
	for _, name := range names {
		i := slices.IndexFunc(webhookEvents, func(e webhookEvent) bool { return e.name == name })
		if i < 0 {
			return 0, fmt.Errorf("%w: unknown event (known: %s, %s)", ErrInvalidWebhook, EventTargetFinished, EventJobFinished)
		}
		set |= webhookEvents[i].bit
	}
	if set == batchdriver.HookFinished {
		return 0, nil
	}
	return set, nil
}

// webhookEventNames returns the event types of a stored set, in a fixed
// order; nil for the default set.
func webhookEventNames(set batchdriver.HookEvents) []string {
	if set == 0 || set == batchdriver.HookFinished {
		return nil
	}
	var names []string
	for _, e := range webhookEvents {
		if set.Has(e.bit) {
			names = append(names, e.name)
		}
	}
	return names
}

// withEvents is the idempotency key of a submit whose key without its
// webhook's events is key: key itself for the default events, else the
// hex SHA-256 of key, a NUL byte and the event types. The events are part
// of the request: the same list asking for other events is another job,
// so that no submit silently loses the events it asked for.
func withEvents(key string, set batchdriver.HookEvents) string {
	names := webhookEventNames(set)
	if names == nil {
		return key
	}
	sum := sha256.Sum256([]byte(key + "\x00events\x00" + strings.Join(names, "\x00")))
	return hex.EncodeToString(sum[:])
}
