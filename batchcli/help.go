package batchcli

import (
	"slices"
	"strings"
)

// Usage is the overview that "batch help" and "batch --help" print, for a
// CLI of the default name ([DefaultName]). A host that mounts the commands
// under another name prints [UsageFor] of that name.
const Usage = `usage: batch <command> [arguments]

commands:
  submit <targets.json|->          submit a list of targets as one job
  status <id> [--results] [--wait] print the job's status; --wait follows it until it is finished
  result <id> <idx>                print one target's result
  results <id> [--follow]          print each finished target with its result, a JSON line each
  retry <id>                       make a new job of the finished job's targets that did not end done
  cancel <id>                      cancel the job
  list [--limit N] [--metadata P]  list your jobs, newest first, or those with labels P
  help [command]                   print this help, or a command's

Run "batch <command> --help" for the details of a command, "batch --version"
for the version. Answers are the server's JSON bodies on standard output;
errors go to standard error.

exit status:
  0    ok; for status --wait, the job ended done
  1    refused: the server answered 4xx, or the targets input is invalid
  2    usage: a wrong command line, or a targets file that cannot be read
  3    the server or the network failed: a 5xx answer, no connection, a timeout
  4    status --wait: the job ended partial, failed or cancelled
  130  interrupted (Ctrl-C)
`

// verb describes one command: its arguments, its flags and its help.
type verb struct {
	// args name the positional arguments, as the help shows them.
	args []string
	// optional is how many of the last args may be left out.
	optional int
	// flags maps each flag's name to whether it takes a value.
	flags map[string]bool
	// help is what "batch <verb> --help" prints, written for
	// [DefaultName] and rendered by [named]; its first line is the synopsis
	// a usage error repeats.
	help string
}

// synopsis is the first line of the verb's help, for a CLI named name.
func (v verb) synopsis(name string) string {
	line, _, _ := strings.Cut(v.help, "\n")
	return named(line, name)
}

// takes says which flags the verb takes, for an unknown flag's error:
// "list takes --limit", "cancel takes no flags".
func (v verb) takes(name string) string {
	if len(v.flags) == 0 {
		return name + " takes no flags"
	}
	fs := make([]string, 0, len(v.flags))
	for f := range v.flags {
		fs = append(fs, "--"+f)
	}
	slices.Sort(fs)
	return name + " takes " + strings.Join(fs, ", ")
}

// verbs are the commands. Adding one means an entry here, a line in
// [Usage], and a case in [CLI.Run].
var verbs = map[string]verb{
	VerbSubmit: {args: []string{"<targets.json|->"}, flags: map[string]bool{"deadline": true, "skip-invalid": false, "events": true}, help: `usage: batch submit <targets.json|-> [--deadline D] [--skip-invalid] [--events E[,E]]

Submit a list of targets as one job, and print the answer: job_id, status,
targets and reused (and, with --skip-invalid, skipped and skipped_targets).
Submitting the same list again while the job is kept returns that job
("reused": true) instead of making a new one.

The input is a file, or - for standard input, in one of three forms:

  {"targets": [{"url": "https://example.com/", "mode": "clean"}, …]}
  [{"url": "https://example.com/"}, {"url": "https://go.dev/", "grep": "Go"}]
  one URL per line; blank lines and lines starting with # are skipped

A target's fields are url, mode ("", clean, raw or digest), question, pages,
grep, jq (strings), context and recover (booleans). JSON is read as strictly
as the server reads it: field names are exact ("URL" is not "url"), and an
unknown or repeated field, a wrong type or data after the value is refused
before anything is sent (exit 1).

flags:
  --deadline D  end the job at D with what it has: a duration from the
                submit ("90s", "1h30m") or an RFC 3339 time
                ("2026-01-02T15:04:05Z"). Targets not started by then end
                failed with outcome expired; the job ends partial, or
                failed when none is done, with error "deadline". It
                replaces a "deadline" in the input. The server caps it
                (its max_deadline; over it is exit 1, deadline_too_far).
  --skip-invalid
                skip the targets the server refuses (a blocked URL, an
                empty url, options it does not take) instead of refusing
                the whole submit: each ends failed at its idx with outcome
                blocked or invalid, never fetched, and the answer lists
                them by idx with the reason. The others are fetched. Only
                a submit whose every target is refused is refused (exit
                1). It sets "on_invalid": "skip" over the input's.
  --events E    the event types the input's webhook receives, joined by
                commas, as its "events" field names them: the per-target
                event (each target as it finishes, in idx order) and the
                job's end (the default, alone). It replaces the webhook's
                "events" in the input, which must have a webhook
                ({"url": "…"}).
`},
	VerbStatus: {args: []string{"<id>"}, flags: map[string]bool{"results": false, "wait": false, "failed": false}, help: `usage: batch status <id> [--results] [--wait] [--failed]

Print the job's status: its counts and each target's status, error and hint.

flags:
  --results  add each done target's result (its content and metadata)
  --failed   list the failed targets only (the counts by outcome still
             cover every target)
  --wait     follow the job until it is finished, then print its status.
             On a terminal a progress line on standard error shows the
             counts and the time taken, every second:
               12 ok / 1 failed / 32 total · 00:41 · running
             Elsewhere a line is printed per change. Exit status 4 if the
             job ends partial, failed or cancelled. Ctrl-C stops waiting
             (exit 130); the job goes on.
`},
	VerbResult: {args: []string{"<id>", "<idx>"}, help: `usage: batch result <id> <idx>

Print target <idx> of the job (counting from 0) with its result, or its
error and hint if it failed.
`},
	VerbResults: {args: []string{"<id>"}, flags: map[string]bool{"follow": false, "after": true, "failed": false}, help: `usage: batch results <id> [--follow] [--after N] [--failed]

Print the job's finished targets in idx order, one JSON object per line
(NDJSON): idx, url, status, outcome, retryable, then result, or error and
hint. One result is held in memory at a time, however large the job.

flags:
  --follow   keep reading as targets finish, until the job is finished
             (reconnecting by itself when the server ends a stream at its
             one-minute cap). Ctrl-C stops (exit 130); the job goes on.
  --after N  start after target N
  --failed   print the failed targets only, with their errors and hints
`},
	VerbRetry: {args: []string{"<id>"}, help: `usage: batch retry <id>

Make a new job of the finished job's targets that did not end done: its
failed targets and, of a cancelled job or one failed by a restart, those
that never finished, with the same options and in the same order. Print the
answer as submit does, with retry_of. Retrying the same job again while the
first retry is kept returns that retry. A job still running, or one with
every target done, is refused (exit 1).
`},
	VerbCancel: {args: []string{"<id>"}, help: `usage: batch cancel <id>

Cancel the job: the target in flight finishes and is kept, no later target
starts. A finished job cannot be cancelled (exit 1).
`},
	VerbList: {flags: map[string]bool{"limit": true, "metadata": true}, help: `usage: batch list [--limit N] [--metadata KEY=VALUE[,KEY=VALUE…]]

List your jobs, newest first: id, status, counts, metadata and when each
expires.

flags:
  --limit N     list at most N jobs, 1 to 100 (default 20)
  --metadata P  list only your jobs whose metadata holds every pair of P:
                KEY=VALUE pairs joined by commas (a value cannot hold a
                comma). Another caller's jobs are never listed.
`},
	VerbHelp: {args: []string{"[command]"}, optional: 1, help: `usage: batch help [command]

Print the list of commands, or the help of one command (the same as
"batch <command> --help").
`},
}

// UsageFor is [Usage] for a CLI named name, such as "sift batch": what
// "<name> help" and "<name> --help" print. An empty name is [DefaultName].
func UsageFor(name string) string { return named(Usage, name) }

// helpText is what "<name> help [topic]" prints.
func helpText(name, topic string) string {
	if topic == "" {
		return UsageFor(name)
	}
	return named(verbs[topic].help, name)
}

// named renders a help text, written for [DefaultName], for name. The texts
// write the program's name in two places only: after "usage: " and after an
// opening quote (Run "batch status --help"), always followed by a space;
// so that "batch" in running prose never becomes the name, TestUsageFor
// checks that a rendered text holds no "batch" but the name's.
func named(text, name string) string {
	if name == "" || name == DefaultName {
		return text
	}
	return strings.NewReplacer(
		"usage: "+DefaultName+" ", "usage: "+name+" ",
		`"`+DefaultName+" ", `"`+name+" ",
	).Replace(text)
}
