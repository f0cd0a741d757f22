package main

import (
	"bytes"
	"os"
	"testing"
)

// batchnet's table is what the generator writes from the x/net/idna this
// module requires: a newer idna that maps more code points to ASCII shows
// up here.
func TestTableIsCurrent(t *testing.T) {
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../batchnet/idnamap.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("batchnet/idnamap.go is stale: cd examples && go run ./internal/idnagen > ../batchnet/idnamap.go")
	}
}
