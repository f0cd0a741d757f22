package batchcli_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batchcli"
)

func TestParse(t *testing.T) {
	t.Parallel()
	ok := func(args string, want batchcli.Command) {
		t.Helper()
		got, err := batchcli.Parse(strings.Fields(args))
		if err != nil {
			t.Fatalf("Parse(%q): %v", args, err)
		}
		if got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", args, got, want)
		}
	}
	ok("submit targets.json", batchcli.Command{Verb: "submit", File: "targets.json"})
	ok("submit -", batchcli.Command{Verb: "submit", File: "-"})
	ok("submit - --deadline 3s", batchcli.Command{Verb: "submit", File: "-", Deadline: "3s"})
	ok("submit -deadline=2026-01-02T15:04:05Z t.json", batchcli.Command{Verb: "submit", File: "t.json", Deadline: "2026-01-02T15:04:05Z"})
	ok("submit - --skip-invalid", batchcli.Command{Verb: "submit", File: "-", SkipInvalid: true})
	ok("submit --skip-invalid=false t.json", batchcli.Command{Verb: "submit", File: "t.json"})
	ok("submit - --events batch.target.finished,batch.finished", batchcli.Command{Verb: "submit", File: "-",
		Events: "batch.target.finished,batch.finished"})
	ok("status abc", batchcli.Command{Verb: "status", ID: "abc"})
	ok("status abc --results", batchcli.Command{Verb: "status", ID: "abc", Results: true})
	ok("status --wait abc -results", batchcli.Command{Verb: "status", ID: "abc", Results: true, Wait: true})
	ok("status abc --wait=true --results=false", batchcli.Command{Verb: "status", ID: "abc", Wait: true})
	ok("status abc --wait=1 --results=T", batchcli.Command{Verb: "status", ID: "abc", Wait: true, Results: true})
	ok("result abc 3", batchcli.Command{Verb: "result", ID: "abc", Idx: 3})
	ok("cancel abc", batchcli.Command{Verb: "cancel", ID: "abc"})
	ok("list", batchcli.Command{Verb: "list"})
	ok("list --limit 5", batchcli.Command{Verb: "list", Limit: 5})
	ok("list --limit=100", batchcli.Command{Verb: "list", Limit: 100})
	ok("help", batchcli.Command{Verb: "help"})
	ok("--help", batchcli.Command{Verb: "help"})
	ok("status -- --weird-id", batchcli.Command{Verb: "status", ID: "--weird-id"})
	ok("help status", batchcli.Command{Verb: "help", Topic: "status"})
	ok("help help", batchcli.Command{Verb: "help", Topic: "help"})
	// --help wins over whatever else the line holds, before "--".
	for _, verb := range []string{"submit", "status", "result", "cancel", "list"} {
		ok(verb+" --help", batchcli.Command{Verb: "help", Topic: verb})
		ok(verb+" -h", batchcli.Command{Verb: "help", Topic: verb})
	}
	ok("status abc --bogus -help", batchcli.Command{Verb: "help", Topic: "status"})
	ok("result --help 1 2 3", batchcli.Command{Verb: "help", Topic: "result"})
	ok("status -- --help", batchcli.Command{Verb: "status", ID: "--help"})

	bad := func(args, wantInMsg string) {
		t.Helper()
		_, err := batchcli.Parse(strings.Fields(args))
		var ue *batchcli.UsageError
		if !errors.As(err, &ue) {
			t.Fatalf("Parse(%q) error = %v, want a UsageError", args, err)
		}
		if !strings.Contains(ue.Error(), wantInMsg) {
			t.Errorf("Parse(%q) error %q does not mention %q", args, ue, wantInMsg)
		}
		if batchcli.ExitCode(err) != 2 {
			t.Errorf("ExitCode(%v) = %d, want 2", err, batchcli.ExitCode(err))
		}
	}
	bad("", "missing command")
	bad("frobnicate", `unknown command "frobnicate"`)
	bad("submit", "submit: missing <targets.json|->")
	bad("submit - --deadline PT3S", `--deadline must be a duration such as 90s or an RFC 3339 time such as 2026-01-02T15:04:05Z, got "PT3S"`)
	bad("submit - --deadline -3s", `--deadline must be a duration`)
	bad("submit - --deadline", "flag --deadline needs a value")
	bad("submit - --events batch.finished,", `--events must be event types joined by commas, got "batch.finished,"`)
	bad("submit - --events=", `--events must be event types joined by commas, got ""`)
	bad("status x --events batch.finished", `unknown flag "--events"`)
	bad("status abc --deadline 3s", "status takes --failed, --results, --wait")
	bad("status abc --skip-invalid", "status takes --failed, --results, --wait")
	bad("submit - --skip-invalid=maybe", "flag --skip-invalid takes no value")
	bad("submit a.json b.json", `submit: unexpected argument "b.json"`)
	bad("status", "status: missing <id>")
	bad("status a b", `unexpected argument "b"`)
	bad("status abc --bogus", `unknown flag "--bogus"`)
	bad("status abc --wait --wait", "given twice")
	bad("status abc --wait=maybe", "takes no value")
	bad("result abc", "result: missing <idx>")
	bad("result abc x", "non-negative integer")
	bad("result abc -1", `unknown flag "-1"`)
	bad("cancel", "cancel: missing <id>")
	bad("cancel a --results", "unknown flag")
	bad("list extra", `list: unexpected argument "extra"`)
	bad("list --limit", "needs a value")
	bad("list --limit 0", "from 1 to 100")
	bad("list --limit 101", "from 1 to 100")
	bad("submit --wait x", "unknown flag")
	bad("help bogus", `unknown command "bogus"`)
	bad("help status list", `help: unexpected argument "list"`)
	if _, err := batchcli.Parse([]string{"status", ""}); err == nil || !strings.Contains(err.Error(), "empty job id") {
		t.Errorf(`Parse("status", "") error = %v, want "empty job id"`, err)
	}
}
