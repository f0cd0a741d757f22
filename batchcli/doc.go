// Package batchcli is the batch command set a host CLI mounts.
//
// The commands are submit, status, result, results, retry, cancel and list.
// They speak to the server through a [batchhttp.Client]. Output is the
// server's JSON body, indented, so that an agent can parse it. Errors go to
// standard error with the server's message and hint.
//
// # Getting started
//
// Build one [CLI] and run it with the arguments after the host's command:
//
//	cli := batchcli.New(batchcli.Config{
//		Name:        "sift batch",              // starts usage, help and every error line
//		KeyHint:     "log in with: sift login", // what a 401 tells the user
//		GlobalFlags: []string{"--server URL"},  // the host's flags before the command
//		Client:      client,
//	})
//	err := cli.Run(ctx, os.Args[2:])
//	os.Exit(batchcli.ExitCode(err))
//
// [CLI.Run] never exits the process. It writes its own errors to Stderr and
// returns them wrapped in [ErrReported], so the host prints nothing more.
// The host cancels Run's context on Ctrl-C. examples/batch is such a host.
//
// # Exit codes
//
// Scripts can rely on these; each is a constant:
//
//	code  constant           meaning
//	0     ExitOK             the command did what it was asked; for status --wait, the job ended done
//	1     ExitRefused        the server answered 4xx, or the CLI refused the targets input
//	2     ExitUsage          a wrong command line, or a targets file that cannot be read
//	3     ExitServerError    a 5xx answer, no connection, a timeout: trying later may help
//	4     ExitJobNotDone     status --wait: the job ended partial, failed or cancelled
//	130   ExitInterrupted    Run's context was cancelled (Ctrl-C in the example CLI)
//
// # More
//
// docs/cli.md in the repository describes each command, the progress line
// of status --wait, and the Config fields in full.
package batchcli
