// Package batchobserve is the observer contract of batchkit: what a tracer
// or other instrumentation implements to follow jobs through a runner.
//
// Most hosts do not implement it: batchotel makes an [Observer] for
// OpenTelemetry, and a host sets it as batch.Config.Observer.
//
// The runner announces each step (a submit, a job's drain, a target's
// fetch and its write, a webhook delivery, a reap) as it begins, and calls
// the function the observer returned once, when the step ends, with an
// *End value. No event carries a URL, a host, an idempotency key or an
// error text: an observer cannot record what it is never given.
package batchobserve
