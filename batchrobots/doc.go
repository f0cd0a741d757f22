// Package batchrobots checks targets against their hosts' robots.txt
// rules (RFC 9309), for a batch runner's Config.Robots.
//
// A [Checker] fetches each host's robots.txt through a guarded
// batchnet.Client, once for all the checks that ask at the same time, and
// caches its rules per scheme, host and port, bounded in hosts and age. A
// disallowed target ends with outcome robots, without a request; the
// Crawl-delay of the host's group spaces its fetch starts.
//
// Start with one checker per runner:
//
//	robots, err := batchrobots.New(batchrobots.Config{Client: client, UserAgent: "mybot"})
//	runner, err := batch.New(batch.Config{Store: store, Fetch: fetch, Robots: robots.Check})
//
// The rules are read with github.com/temoto/robotstxt, made lenient
// first: a line it would refuse is dropped, not the whole file. A
// robots.txt that cannot be read refuses its host's targets with a
// retryable error for a minute. Logs and errors never hold a URL or a host.
package batchrobots
