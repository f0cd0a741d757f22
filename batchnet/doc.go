// Package batchnet decides which fetch targets a batch host may reach: one
// classifier of special addresses, used both by the pre-check at submit
// (no DNS) and by the connect-time check a fetcher plugs into its dialer,
// so that the two never disagree.
//
//	guard := batchnet.NewGuard(nil)               // an allow list, for local testing
//	err := guard.Precheck(rawURL)                 // at submit: scheme, port, host rules
//	dialer := &net.Dialer{Control: guard.Control} // at connect: every dialled address
//
// A refusal is a *[BlockedError], "blocked: <reason>", with one of the
// Reason constants and the outcome [batch.OutcomeBlocked]; it never repeats
// the URL, the host or the address, so it may go into a stored target
// error. [Classify] is the address rule itself (the IANA special-purpose
// registries, and the IPv6 forms that embed an IPv4 address).
//
// The pre-check alone is not enough: a public name can resolve to a
// private address at fetch time (or be rebound between two lookups), and a
// redirect may lead anywhere. Guard.Control sees the address the dialer is
// about to connect to, after resolution, for every connection, redirects
// included. examples/internal/fetcher shows a transport built on it.
package batchnet
