// Package batchnet is the network kit of a batch host: it decides which
// fetch targets may be reached, fetches them through a guarded HTTP client,
// and turns what goes wrong into errors that are safe to store and show.
//
// # Guard
//
// A [Guard] holds one classifier of special addresses ([Classify]: the IANA
// special-purpose registries, and the IPv6 forms that embed an IPv4
// address), used in two places so that they never disagree:
//
//   - [Guard.Precheck] checks a URL at submit, without DNS: http or https,
//     port 80 or 443, a host and no user info, no IP literal in a refused
//     range, no legacy numeric host form. [Guard.PrecheckFunc] is the same
//     check in the shape of a batchhttp pre-check hook, and the package
//     function [Precheck] is the check without an allow list.
//   - [Guard.Control] checks, in a [net.Dialer], the address about to be
//     connected to, after name resolution.
//
// The pre-check alone is not enough: a public name can resolve to a
// private address at fetch time (or be rebound between two lookups), and a
// redirect may lead anywhere. An allow list of exact "host:port" strings
// exempts local test servers from both checks; see [Guard].
//
// # Client
//
// A [Client] ([NewClient]) is an HTTP client built on the guard. It never
// uses a proxy from the environment; it pre-checks the URL of every request
// and of every redirect, and follows at most [ClientOptions.MaxRedirects];
// it resolves a host name once and refuses the name whole if any of its
// answers is refused, so a name with mixed public and private answers
// cannot slip through whichever answer a dialer picks; and it dials the
// checked addresses, not the name, each checked once more just before
// connect. [Client.Do] bounds each request by [ClientOptions.Timeout],
// body included. [Client.HTTPClient] is the same client as an
// *http.Client, for a webhook sender, so that a webhook cannot reach what
// a target cannot.
//
// # Errors
//
// The runner stores a target's error and returns it to the job's owner, so
// it must not hold the URL, a host name or an address, which net/http's
// errors (*url.Error, *net.OpError, x509 errors) all embed. [CleanError]
// replaces any such error with one of fixed text that carries a
// [batch.Outcome], so that the runner records the outcome: a
// *[BlockedError] ("blocked: <reason>", with one of the Reason constants)
// for a refusal of the guard, and a *[FetchError] for the rest ("connect:
// connection refused", "dns: host not found", "timeout: no response before
// the deadline", …; [CleanError] lists them). A deadline of the fetch's
// context still matches context.DeadlineExceeded with [errors.Is].
// [StatusError] does the same for a final HTTP status. [Client.Do] returns
// its errors, and those of reading a response body, already cleaned.
//
// # Wiring
//
// A host builds one client and gives it to the three places that reach
// out, so that all three apply the same rules:
//
//	client, err := batchnet.NewClient(batchnet.ClientOptions{Allow: cfg.Allow})
//	...
//	handler, err := batchhttp.NewHandler(runner, &batchhttp.HandlerOpts{
//		Precheck: client.Guard().PrecheckFunc, // at submit
//		...
//	})
//	sender, err := batchhttp.NewWebhookSender(client.HTTPClient(), secret)
//
//	// The runner's FetchFunc.
//	func fetch(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
//		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
//		if err != nil {
//			return batch.Result{}, &batchnet.BlockedError{Reason: batchnet.ReasonUnparseable}
//		}
//		resp, err := client.Do(req) // a clean error
//		if err != nil {
//			return batch.Result{}, err
//		}
//		defer resp.Body.Close()
//		if err := batchnet.StatusError(resp.StatusCode); err != nil {
//			return batch.Result{}, err
//		}
//		body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes))
//		if err != nil {
//			return batch.Result{}, err // clean too
//		}
//		return batch.Result{Content: string(body)}, nil
//	}
//
// A fetcher with its own transport can still use the guard's two halves
// and [CleanError] directly.
package batchnet
