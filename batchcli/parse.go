package batchcli

import (
	"fmt"
	"strconv"
	"strings"
)

// Verbs of the batch command.
const (
	VerbSubmit = "submit"
	VerbStatus = "status"
	VerbResult = "result"
	VerbCancel = "cancel"
	VerbList   = "list"
	VerbHelp   = "help"
)

// Command is one parsed command line.
type Command struct {
	Verb string
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
	// Limit (list --limit N) caps the jobs listed; 0 means the server's
	// default.
	Limit int
}

// UsageError is a command line the CLI cannot run. Hosts exit with status 2
// for it (see [ExitCode]).
type UsageError struct {
	Msg string
}

// Error returns the message.
func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Usage is the help text of the batch command.
const Usage = `usage: batch <command> [arguments]

commands:
  submit <targets.json|->          submit a list of targets as one job; prints job_id and reused.
                                   Input is {"targets":[…]}, a JSON array of targets, or one URL per line.
  status <id> [--results] [--wait] print the job's status; --results adds each result,
                                   --wait follows the job until it is finished
  result <id> <idx>                print one target's result
  cancel <id>                      cancel the job
  list [--limit N]                 list your jobs, newest first
`

// flagSpec says which flags a verb takes and whether each takes a value.
var flagSpec = map[string]map[string]bool{
	VerbSubmit: {},
	VerbStatus: {"results": false, "wait": false},
	VerbResult: {},
	VerbCancel: {},
	VerbList:   {"limit": true},
	VerbHelp:   {},
}

// positionals is how many positional arguments each verb takes.
var positionals = map[string]int{
	VerbSubmit: 1, VerbStatus: 1, VerbResult: 2, VerbCancel: 1, VerbList: 0, VerbHelp: 0,
}

// Parse parses the arguments of the batch command (without the program
// name): a verb, then its positional arguments and flags in any order. Flags
// take one or two dashes; a flag's value follows it or an "=". A lone "-" is
// a positional argument (standard input), and "--" ends the flags. Every
// error is a *[UsageError].
func Parse(args []string) (Command, error) {
	if len(args) == 0 {
		return Command{}, usagef("missing command")
	}
	verb := args[0]
	if verb == "-h" || verb == "--help" {
		verb = VerbHelp
	}
	spec, ok := flagSpec[verb]
	if !ok {
		return Command{}, usagef("unknown command %q", verb)
	}
	cmd := Command{Verb: verb}
	var pos []string
	flags := map[string]string{}
	rest := args[1:]
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
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue, known := spec[name]
		if !known {
			return Command{}, usagef("%s: unknown flag %q", verb, a)
		}
		if _, dup := flags[name]; dup {
			return Command{}, usagef("%s: flag --%s given twice", verb, name)
		}
		switch {
		case takesValue && !hasValue:
			if i+1 >= len(rest) {
				return Command{}, usagef("%s: flag --%s needs a value", verb, name)
			}
			i++
			value = rest[i]
		case !takesValue && hasValue:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return Command{}, usagef("%s: flag --%s takes no value", verb, name)
			}
			value = strconv.FormatBool(b)
		case !takesValue:
			value = "true"
		}
		flags[name] = value
	}
	if want := positionals[verb]; len(pos) != want {
		return Command{}, usagef("%s: want %d argument(s), got %d", verb, want, len(pos))
	}
	switch verb {
	case VerbSubmit:
		cmd.File = pos[0]
	case VerbStatus, VerbCancel:
		cmd.ID = pos[0]
	case VerbResult:
		cmd.ID = pos[0]
		idx, err := strconv.Atoi(pos[1])
		if err != nil || idx < 0 {
			return Command{}, usagef("result: index must be a non-negative integer, got %q", pos[1])
		}
		cmd.Idx = idx
	}
	if cmd.ID == "" && (verb == VerbStatus || verb == VerbCancel || verb == VerbResult) {
		return Command{}, usagef("%s: empty job id", verb)
	}
	cmd.Results = flags["results"] == "true"
	cmd.Wait = flags["wait"] == "true"
	if v, ok := flags["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return Command{}, usagef("list: --limit must be an integer from 1 to 100, got %q", v)
		}
		cmd.Limit = n
	}
	return cmd, nil
}
