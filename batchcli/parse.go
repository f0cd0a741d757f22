package batchcli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/siftfetch/batchkit/batchhttp"
)

// Verbs of the batch command.
const (
	VerbSubmit  = "submit"
	VerbStatus  = "status"
	VerbResult  = "result"
	VerbCancel  = "cancel"
	VerbRetry   = "retry"
	VerbResults = "results"
	VerbList    = "list"
	VerbHelp    = "help"
	// VerbVersion is what [Parse] makes of "--version" (or "-version")
	// given alone: print the CLI's name and version. It is a flag of the
	// command set, as --help is, not a command: "version" alone is an
	// unknown command, so that it never shadows a host's own "version".
	VerbVersion = "version"
)

// Command is one parsed command line.
type Command struct {
	// Verb is the command: one of the Verb constants.
	Verb string
	// Topic is the verb whose help VerbHelp prints ("batch help status",
	// "batch status --help"); empty for the overview ("batch help",
	// "batch --help").
	Topic string
	// File is submit's input: a path, or "-" for standard input.
	File string
	// ID is the job id of status, result and cancel.
	ID string
	// Idx is result's target index.
	Idx int
	// Results (status --results) includes each done target's result.
	Results bool
	// Wait (status --wait) follows the job until it is finished.
	Wait bool
	// Follow (results --follow) keeps the stream open until the job is
	// finished.
	Follow bool
	// After (results --after N), if not nil, starts after target N.
	After *int
	// Failed (status --failed, results --failed) reads the failed
	// targets only.
	Failed bool
	// Limit (list --limit N) caps the jobs listed; 0 means the server's
	// default.
	Limit int
	// Metadata (list --metadata KEY=VALUE[,KEY=VALUE…]) lists only the
	// jobs with those labels, as given (checked: see [Command.Labels]);
	// "" for all.
	Metadata string
	// Deadline (submit --deadline D) is the job's deadline as given: a
	// duration or an RFC 3339 time (see batchhttp.ParseDeadline); "" for
	// none.
	Deadline string
	// SkipInvalid (submit --skip-invalid) makes the submit lenient
	// (on_invalid "skip"): the targets the server refuses are finished at
	// once instead of refusing the submit.
	SkipInvalid bool
	// Events (submit --events E[,E…]) are the event types of the input's
	// webhook, as given: joined by commas, none empty (the server knows
	// the types); "" for those of the input.
	Events string
}

// UsageError is a command line the CLI cannot run. Hosts exit with status
// [ExitUsage] for it (see [ExitCode]).
type UsageError struct {
	// Verb is the command the error is about; empty if the command itself
	// is missing or unknown.
	Verb string
	// Msg says what is wrong, e.g. "missing <id>".
	Msg string
	// Flag is the flag as given, without a value ("--key" of
	// "--key=K"), when the error is that Verb does not take it; empty
	// otherwise. The CLI uses it to tell a host's global flag given after
	// the command (see [Config.GlobalFlags]).
	Flag string
}

// Error returns the message, prefixed with the verb if there is one.
func (e *UsageError) Error() string {
	if e.Verb == "" {
		return e.Msg
	}
	return e.Verb + ": " + e.Msg
}

func usagef(verb, format string, args ...any) error {
	return &UsageError{Verb: verb, Msg: fmt.Sprintf(format, args...)}
}

// Parse parses the arguments of the batch command (without the program
// name): a verb, then its positional arguments and flags in any order. Flags
// take one or two dashes; a flag's value follows it or an "=". A lone "-" is
// a positional argument (standard input), and "--" ends the flags. -h or
// --help anywhere before "--" asks for the verb's help: the result is
// VerbHelp with the verb as Topic, whatever else the line holds. --version
// as the only argument is [VerbVersion]. Every error is a *[UsageError].
// An unknown flag's error names the flag without its value ("--key" of
// "--key=K"): it may be a host's global flag, and its value a key.
func Parse(args []string) (Command, error) {
	if len(args) == 0 {
		return Command{}, usagef("", "missing command")
	}
	name := args[0]
	if name == "--version" || name == "-version" {
		if len(args) > 1 {
			return Command{}, usagef("", "unexpected argument %q after %s", args[1], name)
		}
		return Command{Verb: VerbVersion}, nil
	}
	if isHelpFlag(name) {
		name = VerbHelp
	}
	v, ok := verbs[name]
	if !ok {
		return Command{}, usagef("", "unknown command %q", name)
	}
	rest := args[1:]
	for _, a := range rest {
		if a == "--" {
			break
		}
		if isHelpFlag(a) {
			return Command{Verb: VerbHelp, Topic: name}, nil
		}
	}
	cmd := Command{Verb: name}
	var pos []string
	flags := map[string]string{}
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		fname, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue, known := v.flags[fname]
		if !known {
			given, _, _ := strings.Cut(a, "=")
			return Command{}, &UsageError{Verb: name, Flag: given, Msg: fmt.Sprintf("unknown flag %q (%s)", given, v.takes(name))}
		}
		if _, dup := flags[fname]; dup {
			return Command{}, usagef(name, "flag --%s given twice", fname)
		}
		switch {
		case takesValue && !hasValue:
			if i+1 >= len(rest) {
				return Command{}, usagef(name, "flag --%s needs a value", fname)
			}
			i++
			value = rest[i]
		case !takesValue && hasValue:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return Command{}, usagef(name, "flag --%s takes no value", fname)
			}
			value = strconv.FormatBool(b)
		case !takesValue:
			value = "true"
		}
		flags[fname] = value
	}
	if len(pos) > len(v.args) {
		return Command{}, usagef(name, "unexpected argument %q", pos[len(v.args)])
	}
	if len(pos) < len(v.args)-v.optional {
		return Command{}, usagef(name, "missing %s", v.args[len(pos)])
	}
	switch name {
	case VerbHelp:
		if len(pos) == 1 {
			if _, ok := verbs[pos[0]]; !ok {
				return Command{}, usagef("", "unknown command %q", pos[0])
			}
			cmd.Topic = pos[0]
		}
	case VerbSubmit:
		cmd.File = pos[0]
	case VerbStatus, VerbCancel, VerbRetry, VerbResults:
		cmd.ID = pos[0]
	case VerbResult:
		cmd.ID = pos[0]
		idx, err := strconv.Atoi(pos[1])
		if err != nil || idx < 0 {
			return Command{}, usagef(name, "<idx> must be a non-negative integer, got %q", pos[1])
		}
		cmd.Idx = idx
	}
	if cmd.ID == "" && name != VerbHelp && name != VerbSubmit && name != VerbList {
		return Command{}, usagef(name, "empty job id")
	}
	cmd.Results = flags["results"] == "true"
	cmd.Wait = flags["wait"] == "true"
	cmd.Follow = flags["follow"] == "true"
	cmd.Failed = flags["failed"] == "true"
	cmd.SkipInvalid = flags["skip-invalid"] == "true"
	if s, ok := flags["deadline"]; ok {
		if _, _, err := batchhttp.ParseDeadline(s); err != nil {
			return Command{}, usagef(name, "--deadline must be a duration such as 90s or an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", s)
		}
		cmd.Deadline = s
	}
	if s, ok := flags["events"]; ok {
		if slices.Contains(strings.Split(s, ","), "") {
			return Command{}, usagef(name, "--events must be event types joined by commas, got %q", s)
		}
		cmd.Events = s
	}
	if s, ok := flags["after"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return Command{}, usagef(name, "--after must be a non-negative integer, got %q", s)
		}
		cmd.After = &n
	}
	if s, ok := flags["metadata"]; ok {
		if _, err := parseLabels(s); err != nil {
			return Command{}, usagef(name, "%v", err)
		}
		cmd.Metadata = s
	}
	if s, ok := flags["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return Command{}, usagef(name, "--limit must be an integer from 1 to 100, got %q", s)
		}
		cmd.Limit = n
	}
	return cmd, nil
}

// Labels returns the pairs of c.Metadata; nil for none.
func (c Command) Labels() map[string]string {
	m, _ := parseLabels(c.Metadata) // checked by Parse
	return m
}

// parseLabels reads KEY=VALUE pairs joined by commas; "" is nil.
func parseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--metadata must be KEY=VALUE pairs joined by commas, got %q", s)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("--metadata gives key %q twice", k)
		}
		m[k] = v
	}
	return m, nil
}

func isHelpFlag(a string) bool { return a == "-h" || a == "--help" || a == "-help" }
