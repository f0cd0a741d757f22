package batchhttp

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them, and
// reports how many answers were checked against openapi.json (go test
// shows it with -v).
func TestMain(m *testing.M) { goleak.VerifyTestMain(reportingM{m}) }

type reportingM struct{ m *testing.M }

func (r reportingM) Run() int {
	code := r.m.Run()
	fmt.Println(contractReport())
	return code
}
