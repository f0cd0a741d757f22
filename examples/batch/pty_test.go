//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
)

// openPTY opens a pseudo-terminal and returns its master and slave ends. It
// makes the two ioctls of unlockpt(3) and ptsname(3) with the standard
// library, so that the test needs no module the library does not have.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("open /dev/ptmx: %v", err)
		}
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	rc, err := m.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var (
		n    uint32
		ierr error
	)
	// Control, not Fd: Fd would put the master into blocking mode, and a
	// read blocked outside the poller would outlive the test.
	err = rc.Control(func(fd uintptr) {
		var unlock int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
			ierr = fmt.Errorf("unlockpt: %w", e)
			return
		}
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
			ierr = fmt.Errorf("ptsname: %w", e)
		}
	})
	if err = errors.Join(err, ierr); err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// progressRe matches one drawing of the live progress line.
var progressRe = regexp.MustCompile(`(\d+ ok / \d+ failed / \d+ total) · (\d\d:\d\d) · (\w+)`)

// A person runs status --wait in a terminal while a slow target holds the
// job still: the live line's clock moves with nothing else changing, and
// Ctrl-C (typed into the terminal, so the terminal's line discipline sends
// SIGINT) ends the command with exit 130, one line saying the job goes on,
// and no raw "context canceled". The job is still running afterwards.
func TestBatch_TerminalProgressAndCtrlC(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the CLI")
	}
	bin := buildBatch(t)
	fetch := batchtest.NewBlockingFetcher()
	url := serve(t, fetch.Fetch)
	code, stdout, stderr := runBatch(t, "https://a.test/1\nhttps://a.test/2\n", "--server", url, "--key", "s3cret", "submit", "-")
	if code != batchcli.ExitOK {
		t.Fatalf("submit: exit %d, %s", code, stderr)
	}
	id := decodeJSON[batchhttp.SubmitResponse](t, stdout).JobID
	<-fetch.Started

	master, slave := openPTY(t)
	cmd := exec.Command(bin, "status", id, "--wait")
	cmd.Env = append(os.Environ(), "BATCH_SERVER="+url, "BATCH_KEY=s3cret")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session, with the pty as its controlling terminal: then ^C on
	// the master is SIGINT to it, as in a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // the child has it; the master reads EOF (EIO) once the child is gone
	chunks := make(chan string)
	go func() {
		defer close(chunks)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				chunks <- string(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range chunks {
		}
		cmd.Wait()
	})

	// A stuck command fails here rather than at the test binary's timeout;
	// nothing is asserted about how long anything takes.
	guard := time.NewTimer(60 * time.Second)
	defer guard.Stop()
	var out strings.Builder
	read := func() bool {
		select {
		case c, ok := <-chunks:
			out.WriteString(c)
			return ok
		case <-guard.C:
			t.Fatalf("the CLI stalled; terminal so far: %q", out.String())
		}
		return false
	}
	// Read frames until the clock shows two different values (it ticks once
	// a second), within a bounded number of frames.
	clocks := map[string]bool{}
	for len(clocks) < 2 {
		if !read() {
			t.Fatalf("the CLI ended early; terminal: %q", out.String())
		}
		frames := progressRe.FindAllStringSubmatch(out.String(), -1)
		if len(frames) > 20 {
			t.Fatalf("20 frames and the clock still shows %v; terminal: %q", clocks, out.String())
		}
		for _, f := range frames {
			if f[1] != "0 ok / 0 failed / 2 total" || f[3] != "running" {
				t.Fatalf("frame %q, want the held job's counts; terminal: %q", f[0], out.String())
			}
			clocks[f[2]] = true
		}
	}
	if !strings.Contains(out.String(), "\r\033[K0 ok / 0 failed / 2 total · ") {
		t.Errorf("the line is not redrawn in place; terminal: %q", out.String())
	}

	if _, err := master.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	for read() {
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != batchcli.ExitInterrupted {
		t.Errorf("after Ctrl-C: %v, want exit status %d; terminal: %q", err, batchcli.ExitInterrupted, out.String())
	}
	term := out.String()
	want := "batch: interrupted; stopped waiting; the job goes on (batch cancel " + id + " stops it)\r\n"
	if !strings.HasSuffix(term, want) || strings.Contains(term, "context canceled") {
		t.Errorf("terminal ends %q, want %q and no raw error", term[max(len(term)-200, 0):], want)
	}

	code, stdout, _ = runBatch(t, "", "--server", url, "--key", "s3cret", "status", id)
	if st := decodeJSON[batchhttp.StatusResponse](t, stdout); code != batchcli.ExitOK || st.Status != "running" {
		t.Errorf("the job after Ctrl-C: exit %d, status %q; want it running", code, st.Status)
	}
	fetch.Release()
	fetch.Release()
}
