package batchcli

import (
	"errors"
	"fmt"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// Exit codes that [ExitCode] maps the error of [CLI.Run] to. Scripts can
// rely on them; the package documentation has the table.
const (
	// ExitOK: the command did what it was asked; for status --wait, the
	// job ended done.
	ExitOK = 0
	// ExitRefused: the server refused the request with a 4xx answer (a bad
	// request, a missing or wrong key, an unknown job, a cap: 429), or the
	// CLI refused the targets input before sending it, for a reason the
	// server answers 400. The same command will be refused again, except
	// for a 429 once its Retry-After has passed.
	ExitRefused = 1
	// ExitUsage: the command line is wrong, or names a targets file that
	// cannot be read.
	ExitUsage = 2
	// ExitServerError: the server or the network failed: a 5xx answer, no
	// connection, a timeout, or an answer that could not be read. Trying
	// again later may help.
	ExitServerError = 3
	// ExitJobNotDone: status --wait followed the job to its end, and it
	// ended partial, failed or cancelled rather than done. The status body
	// is printed all the same; its "status" says which.
	ExitJobNotDone = 4
	// ExitInterrupted: the context of [CLI.Run] was cancelled, as the
	// example CLI does on Ctrl-C (SIGINT). It is 128 + 2, what a shell
	// reports for a command that SIGINT ended.
	ExitInterrupted = 130
)

// ExitCode maps the error of [CLI.Run] to a process exit code: [ExitOK] for
// nil, then [ExitInterrupted], [ExitUsage], [ExitJobNotDone],
// [ExitRefused] for a 4xx answer, [ExitServerError] for any other answer
// or for none, and [ExitRefused] for anything else (the CLI's own check of
// the input).
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if _, ok := errors.AsType[*interruptedError](err); ok {
		return ExitInterrupted
	}
	if _, ok := errors.AsType[*UsageError](err); ok {
		return ExitUsage
	}
	if _, ok := errors.AsType[*jobError](err); ok {
		return ExitJobNotDone
	}
	if ae, ok := errors.AsType[*batchhttp.APIError](err); ok {
		if ae.StatusCode >= 400 && ae.StatusCode <= 499 {
			return ExitRefused
		}
		return ExitServerError
	}
	if _, ok := errors.AsType[*serverError](err); ok {
		return ExitServerError
	}
	return ExitRefused
}

// serverError is a client call that got no answer it could use: no
// connection, a timeout, a body that could not be read or decoded.
type serverError struct{ err error }

func (e *serverError) Error() string { return e.err.Error() }
func (e *serverError) Unwrap() error { return e.err }

// fromClient classifies the error of a client call: an answer of the
// server stays an *batchhttp.APIError, anything else is a *serverError.
func fromClient(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*batchhttp.APIError](err); ok {
		return err
	}
	return &serverError{err: err}
}

// jobError is a job that status --wait saw end other than done.
type jobError struct{ s batchhttp.StatusResponse }

func (e *jobError) Error() string {
	ok, failed := counts(e.s)
	switch e.s.Status {
	case batch.JobCancelled:
		return fmt.Sprintf("job was cancelled: %d of %d targets finished", ok+failed, e.s.TargetsTotal)
	case batch.JobFailed:
		msg := fmt.Sprintf("job failed: %d of %d targets failed", failed, e.s.TargetsTotal)
		if e.s.Error != "" {
			msg += " (" + e.s.Error + ")"
		}
		return msg
	}
	return fmt.Sprintf("job ended %s: %d of %d targets failed", e.s.Status, failed, e.s.TargetsTotal)
}

// interruptedError is a command whose context was cancelled.
type interruptedError struct {
	err error
	// note tells what became of the command's request, if that matters.
	note string
}

func (e *interruptedError) Error() string { return "interrupted" }
func (e *interruptedError) Unwrap() error { return e.err }

// interruptNote says what an interruption of cmd, run by the CLI named
// name, leaves behind on the server.
func interruptNote(name string, cmd Command) string {
	switch {
	case cmd.Verb == VerbStatus && cmd.Wait:
		return fmt.Sprintf("stopped waiting; the job goes on (%s cancel %s stops it)", name, cmd.ID)
	case cmd.Verb == VerbResults && cmd.Follow:
		return "stopped following; the job goes on"
	case cmd.Verb == VerbRetry:
		return "the retry may have been made; the same retry again returns it rather than making another"
	case cmd.Verb == VerbSubmit:
		return "the job may have been created; the same submit again returns it rather than making another"
	}
	return ""
}
