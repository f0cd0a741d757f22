package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// machine is what the report says about where it ran.
type machine struct {
	CPU        string
	Cores      int
	GOMAXPROCS int
	RAM        int64 // bytes
	Load       string
	OS         string
	Go         string
	SQLite     string
	PostgreSQL string
	Modules    []string // "path version" of the modules measured
	Date       time.Time
}

func machineInfo(ctx context.Context, tmp, pgURL string) (machine, error) {
	m := machine{
		Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), Date: time.Now().UTC(),
	}
	m.CPU, m.RAM, m.Load = cpuModel(), memTotal(), loadAvg()
	if k := kernel(); k != "" {
		m.OS += ", Linux " + k
	}
	v, err := sqliteVersion(filepath.Join(tmp, "version.db"))
	if err != nil {
		return m, err
	}
	m.SQLite = v
	if pgURL != "" {
		if m.PostgreSQL, err = pgVersion(ctx, pgURL); err != nil {
			return m, err
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		want := []string{"github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riversqlite",
			"github.com/riverqueue/river/riverdriver/riverpgxv5", "maragu.dev/goqite", "zombiezen.com/go/sqlite",
			"modernc.org/sqlite", "github.com/jackc/pgx/v5"}
		for _, w := range want {
			for _, d := range bi.Deps {
				if d.Path == w {
					m.Modules = append(m.Modules, d.Path+" "+d.Version)
				}
			}
		}
	}
	return m, nil
}

// sqliteVersion is the SQLite every SQLite contender runs: zombiezen and
// modernc's database/sql driver are the same engine (zombiezen builds on
// modernc).
func sqliteVersion(path string) (string, error) {
	conn, err := sqlite.OpenConn(path)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var v string
	err = sqlitex.ExecuteTransient(conn, "SELECT sqlite_version()", &sqlitex.ExecOptions{
		ResultFunc: func(s *sqlite.Stmt) error { v = s.ColumnText(0); return nil },
	})
	return v, err
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	return parseMemTotal(string(b))
}

// parseMemTotal reads MemTotal (kB) from /proc/meminfo's text.
func parseMemTotal(s string) int64 {
	for line := range strings.SplitSeq(s, "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (m machine) ramText() string {
	if m.RAM == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(m.RAM)/(1<<30))
}
