// Package batchnet decides which fetch targets a batch host may reach, and
// fetches them safely.
//
// A [Guard] refuses loopback, private and other special addresses. It checks
// a URL at submit, without DNS ([Guard.Precheck]), and every address at
// connect time ([Guard.Control]). Both use one classifier, [Classify], so
// they never disagree. A [Client] is an HTTP client built on the guard. Its
// errors never carry the URL, a host name or an address, and each says how
// the target ended ([CleanError], [StatusError]). [ResponseError] also turns
// an upstream's Retry-After into a request for the runner to wait.
//
// # Getting started
//
// Build one client and give it to the three places that reach out:
//
//	client, err := batchnet.NewClient(batchnet.ClientConfig{Allow: cfg.Allow})
//	handler, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{
//		Precheck: client.Guard().PrecheckFunc, // at submit
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
//		if err := batchnet.ResponseError(resp); err != nil {
//			return batch.Result{}, err // a 429 or 503 may ask the runner to wait
//		}
//		body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes))
//		if err != nil {
//			return batch.Result{}, err // clean too
//		}
//		return batch.Result{Content: string(body)}, nil
//	}
//
// An allow list of exact "host:port" strings exempts local test servers.
// A fetcher with its own transport can use [Guard.Control] and
// [CleanError] directly.
//
// # Why two checks
//
// The pre-check alone is not enough. A public name can resolve to a private
// address at fetch time, or be rebound between two lookups. A redirect may
// lead anywhere. So the client resolves a name once, refuses it whole if any
// answer is refused, and dials the checked addresses. docs/security.md in
// the repository lists what each check refuses.
package batchnet
