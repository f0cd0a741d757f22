package batchcli

import "errors"

// Exit codes that [ExitCode] maps the error of [CLI.Run] to.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitRefused: the server said no.
	ExitRefused = 1
	// ExitUsage: the command line is wrong.
	ExitUsage = 2
)

// ExitCode maps the error of [CLI.Run] to a process exit code: [ExitOK] for
// nil, [ExitUsage] for a usage error, [ExitRefused] for anything else.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	default:
		return ExitRefused
	}
}
