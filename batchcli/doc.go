// Package batchcli is the batch command set a host CLI mounts: submit,
// status, result, results, retry, cancel and list, spoken over HTTP through
// a [batchhttp.Client]. It never exits the process: [CLI.Run] returns an error
// and the host's main picks the exit code with [ExitCode].
//
// Output is the server's JSON body, indented, so that an agent can parse it;
// errors go to standard error with the server's message and hint. status
// --wait follows the job with the long-poll until it is finished. On a
// terminal (Stdout and Stderr both) it keeps one progress line on Stderr,
// redrawn on every change and every second, so that its clock runs while
// a slow target holds the counts still:
//
//	12 ok / 1 failed / 32 total · 00:41 · running
//
// Elsewhere it prints that line once per change of the counts.
//
// results prints the results stream instead, one JSON line per finished
// target (NDJSON), as each arrives; with --follow it reads on until the job
// is finished. retry makes a new job of a finished job's targets that did
// not end done and prints the answer as submit does.
//
// # Mounting the commands in a host
//
// A host builds one [CLI] with [New] and calls [CLI.Run] with the arguments
// that follow its own command name; the example CLI, examples/batch, is
// such a host. The [Config] fields a host sets:
//
//   - Name: the command as the user types it, "sift batch". Usage, help,
//     every error line and every command line the CLI suggests start with
//     it ("sift batch: not found (HTTP 404)"). [UsageFor] renders the
//     overview for a name, for the host's own --help. Defaults to "batch".
//   - KeyHint: what a 401 tells the user, in the host's terms ("log in
//     with: sift login"); the server's own hint speaks of HTTP headers.
//   - GlobalFlags: the host's flags that go between Name and the command,
//     as its usage writes them ("--server URL", "--key KEY"). One of them
//     given after the command is still a usage error, but it says where
//     the flag goes: "sift batch --key KEY list". The error names an
//     unknown flag without its value, which may be a key.
//   - Version: what "<Name> --version" prints after the name; [Version],
//     batchkit's module version, unless the host passes its own.
//     --version is a flag of the command set, given alone, as --help is,
//     and not a command: "version" stays free for the host.
//   - Client, Stdin, Stdout, Stderr: the server and the streams; only help
//     and --version run without a Client.
//
// Run writes its own errors to Stderr and returns them wrapped in
// [ErrReported], so the host prints nothing more; the host's main exits
// with [ExitCode] of the error, and cancels Run's context on Ctrl-C.
//
// # Exit codes
//
// Scripts can rely on these; each is a constant:
//
//	code  constant           meaning
//	0     ExitOK             the command did what it was asked; for status --wait, the job ended done
//	1     ExitRefused        the server refused: a 4xx answer (bad request, missing or wrong key,
//	                         unknown job, a finished job cancelled, a cap: 429 with Retry-After);
//	                         or the CLI refused the targets input before sending it
//	2     ExitUsage          a wrong command line, or a targets file that cannot be read
//	3     ExitServerError    the server or the network failed: a 5xx answer, no connection,
//	                         a timeout, an answer that could not be read; trying later may help
//	4     ExitJobNotDone     status --wait: the job ended partial, failed or cancelled; the status
//	                         body is printed all the same, and its "status" says which
//	130   ExitInterrupted    Run's context was cancelled (Ctrl-C in the example CLI)
//
// One code covers the three unfinished ends of --wait rather than one code
// each: a script that cares which reads "status" from the body, and a
// script that does not need not list three codes.
//
// An interrupted command prints one line saying so and what became of its
// request (status --wait: the job goes on; submit: the job may exist, and
// the same submit again returns it), never a raw "context canceled".
package batchcli
