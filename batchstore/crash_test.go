package batchstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// crashWriter is the "write" child: crashWriters goroutines each write
// jobs of 3 targets with results of 1–24 KiB, so that their writes share
// commits (see Group commit in writer.go), and report each job, result and
// job end on stdout only after the store answered, i.e. after the commit
// that holds it. It runs until it is killed.
func crashWriter(ctx context.Context, s *Store) error {
	errs := make(chan error, crashWriters)
	for g := range crashWriters {
		go func() { errs <- crashWriterLoop(ctx, s, g) }()
	}
	return <-errs
}

// crashWriters is how many goroutines of the child write at once.
const crashWriters = 4

// crashWriterLoop is one goroutine of the child: it submits a job, claims
// the oldest queued one (its own or another goroutine's) and drains it.
func crashWriterLoop(ctx context.Context, s *Store, g int) error {
	pid := os.Getpid()
	lim := batchdriver.Limits{JobsPerCaller: 1 << 30, JobsTotal: 1 << 30, TTL: time.Hour}
	for i := 0; ; i++ {
		id := fmt.Sprintf("%d-%d-%d", pid, g, i)
		if _, _, err := s.Create(ctx, withLimits(newJob(id, "alice", 3, time.Now()), lim)); err != nil {
			return err
		}
		fmt.Printf("job %s\n", id) // one write(2) per line: lines of goroutines do not mix
		c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "child"})
		if err != nil {
			return err
		}
		if !ok { // the others took every queued job
			continue
		}
		// One write per target: it stores the target and starts the next,
		// or finishes the job.
		for next := c.Next; next >= 0; {
			fin := batchdriver.TargetFinish{Idx: next, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: crashResult(c.Job.ID, next)}
			st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: "child", Target: fin})
			if err != nil {
				return err
			}
			fmt.Printf("result %s %d\n", c.Job.ID, next)
			if st.Next < 0 {
				fmt.Printf("finished %s %s\n", c.Job.ID, st.Status)
			}
			next = st.Next
		}
	}
}

// crashResult is the deterministic result of one target: 1–24 KiB, so
// that a commit spans several WAL pages.
func crashResult(id string, idx int) []byte {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", id, idx)
	n := 1024 + int(h.Sum32()%(23*1024))
	unit := []byte(fmt.Sprintf("%s/%d;", id, idx))
	return bytes.Repeat(unit, n/len(unit)+1)[:n]
}

// crashKills is how many times TestStore_CrashSafety kills the writer:
// BATCHSTORE_CRASH_KILLS raises it (a nightly run might use 500).
func crashKills(t *testing.T) int {
	if v, err := strconv.Atoi(os.Getenv("BATCHSTORE_CRASH_KILLS")); err == nil && v > 0 {
		return v
	}
	if testing.Short() {
		return 20
	}
	return 30
}

// A child runs the restart hook, then writes jobs and results, and is
// SIGKILLed at a random moment, again and again on one file. After every
// kill the file opens (its quick_check passes), every write the child
// reported is there, the counters match the rows, and the restart hook
// leaves no job queued or running. The kills alternate between synchronous
// FULL and NORMAL: a process crash loses no commit under either.
func TestStore_CrashSafety(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "crash.db")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	kills := crashKills(t)
	var reported, results int
	for k := range kills {
		sync := []Synchronous{SyncFull, SyncNormal}[k%2]
		c := startChild(t, "write", path, sync)
		// Kill at a random moment: after Open (mode 0, 1), once results are
		// flowing (mode 2), or from the start, which may fall inside Open's
		// checks and migrations or the restart hook (mode 3).
		var early []string
		switch mode := k / 2 % 4; mode {
		case 0, 1:
			waitLine(t, c.lines, "ready", 30*time.Second)
		case 2:
			early = waitLines(t, c.lines, "result", 30*time.Second)
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		if err := c.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		facts := early
		for l := range c.lines {
			facts = append(facts, l)
		}
		c.cmd.Wait()
		n, r := verifyAfterCrash(t, path, facts)
		reported += n
		results += r
	}
	t.Logf("%d kills; %d reported writes verified (%d results)", kills, reported, results)
	if results == 0 {
		t.Error("the children never reported a result: the kills came too early to test anything")
	}
}

// verifyAfterCrash reopens the file after a kill and checks every fact the
// child reported, then runs the restart hook. It returns how many facts and
// results it checked.
func verifyAfterCrash(t *testing.T, path string, facts []string) (checked, results int) {
	t.Helper()
	ctx := t.Context()
	start := time.Now()
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("reopen after kill took %s", d)
	}
	for _, f := range facts {
		fields := strings.Fields(f)
		switch fields[0] {
		case "ready", "recovered":
			continue
		case "job":
			if _, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: fields[1], Results: false}); err != nil {
				t.Errorf("reported job %s: %v", fields[1], err)
			}
		case "result":
			idx, _ := strconv.Atoi(fields[2])
			_, tr, err := s.GetTarget(ctx, batchdriver.GetTargetParams{Caller: "alice", JobID: fields[1], Idx: idx})
			if err != nil || tr.Status != batchdriver.TargetDone || !bytes.Equal(tr.Result, crashResult(fields[1], idx)) {
				t.Errorf("reported result %s/%d: status %s, %d bytes, %v", fields[1], idx, tr.Status, len(tr.Result), err)
			}
			results++
		case "finished":
			j, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: fields[1], Results: false})
			if err != nil || string(j.Status) != fields[2] {
				t.Errorf("reported finished job %s %s: status %s, %v", fields[1], fields[2], j.Status, err)
			}
		default:
			t.Errorf("child: %s", f)
		}
		checked++
	}
	if err := s.checkCounters(ctx); err != nil {
		t.Error(err)
	}
	if _, err := s.Reap(ctx, batchdriver.ReapParams{AllLive: true, Reason: "restart"}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM batch_job WHERE `+whereLive); n != 0 {
		t.Errorf("%d jobs queued or running after the restart hook", n)
	}
	if st, err := s.Stats(ctx); err != nil || st.Queued+st.Running != 0 {
		t.Errorf("Stats after the restart hook = %+v, %v", st, err)
	}
	if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Error(err)
	}
	return checked, results
}
