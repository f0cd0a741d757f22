package migrations

import (
	"strings"
	"testing"
	"testing/fstest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoad(t *testing.T) {
	t.Parallel()
	good := fstest.MapFS{
		"m/002_more.sql":  {Data: []byte("B")},
		"m/001_init.sql":  {Data: []byte("A")},
		"m/README":        {Data: []byte("not a migration")},
		"other/003_x.sql": {Data: []byte("elsewhere")},
	}
	got, err := Load(good, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := []Migration{{1, "001_init", "A"}, {2, "002_more", "B"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Load = %+v, want %+v", got, want)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"m/001_a.sql": {}, "m/003_c.sql": {}},
		"twice":     {"m/001_a.sql": {}, "m/001_b.sql": {}},
		"no number": {"m/init.sql": {}},
		"not first": {"m/002_b.sql": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil || !strings.Contains(err.Error(), "name must be") {
			t.Errorf("%s: Load error = %v, want a naming error", name, err)
		}
	}
}
