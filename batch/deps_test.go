package batch_test

import (
	"os/exec"
	"strings"
	"testing"
)

// depRule is the dependency policy of the module, as a statement in the style
// of go/build/deps_test.go: for each package pattern, the module-external
// imports it may have besides the standard library, and the module packages
// it may import. A package not listed may not exist.
var depRule = []struct {
	pkg      string   // package path, relative to the module; "/..." matches below
	external []string // allowed non-stdlib import path prefixes outside the module
	internal []string // allowed module packages
}{
	{"batch", []string{"github.com/google/uuid", "github.com/VictoriaMetrics/metrics"}, nil},
	{"batch/batchtest", nil, []string{"batch"}},
	{"batchstore", []string{"zombiezen.com/go/sqlite", "modernc.org/"}, []string{"batch", "internal/migrations"}},
	{"batchstore/pgstore", []string{pgx}, []string{"batch", "internal/migrations"}},
	{"batchnet", nil, []string{"batch"}},
	{"batchhttp", []string{"github.com/VictoriaMetrics/metrics"}, []string{"batch", "batchnet"}},
	{"batchcli", nil, []string{"batch", "batchhttp"}},
	{"batchconsole", nil, []string{"batch"}},
	{"internal/migrations", nil, nil},
	{"internal/apitest", nil, []string{"batch", "batchhttp"}}, // test support: imported by test files only
	{"examples/...", []string{"*"}, []string{"*"}},
}

// testDepRule adds what test files may import on top.
var testDepRule = map[string][]string{
	"batch":               {"batch/batchtest"},
	"batch/batchtest":     {},
	"batchstore":          {"batch/batchtest"},
	"batchstore/pgstore":  {"batch/batchtest"},
	"batchnet":            {},
	"internal/migrations": {},
	"internal/apitest":    {},
	"batchhttp":           {"batch/batchtest"},
	"batchcli":            {"batch/batchtest", "batchhttp", "internal/apitest"},
	"batchconsole":        {"batch/batchtest"},
}

// testExternal are the module-external imports every package's test files
// may have: the goroutine-leak check each TestMain runs.
var testExternal = []string{"go.uber.org/goleak"}

// testOnlyExternal are module-external imports that one package's test files
// may have and its other files may not: batchhttp's tests hold every answer
// against openapi.json with kin-openapi, which a host never compiles (see
// TestKinOpenAPIOnlyInTests).
var testOnlyExternal = map[string][]string{
	"batchhttp": {kinOpenAPI},
	"batch":     tomlLibraries, // the config block decodes with each (TestConfig_Decode)
}

// tomlLibraries are the two common TOML decoders a host may read its
// [batch] block with; batch's tests decode Config with both.
var tomlLibraries = []string{"github.com/BurntSushi/toml", "github.com/pelletier/go-toml/v2"}

// kinOpenAPI is the OpenAPI validator batchhttp's tests use.
const kinOpenAPI = "github.com/getkin/kin-openapi/"

const module = "github.com/siftfetch/batchkit"

// pgx is the PostgreSQL driver: only batchstore/pgstore may import it (and
// the tests of examples, to tidy a test database), so that a host that does
// not use PostgreSQL never compiles it (see TestPgxOnlyInPgstore).
const pgx = "github.com/jackc/pgx/v5"

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestDependencyRule(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}}|{{join .XTestImports \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.Split(line, "|")
		pkg := strings.TrimPrefix(strings.TrimPrefix(parts[0], module), "/")
		if msg := checkImports(pkg, strings.Fields(parts[1]), nil); msg != "" {
			t.Error(msg)
		}
		testImports := append(strings.Fields(parts[2]), strings.Fields(parts[3])...)
		if msg := checkImports(pkg, testImports, append(testDepRule[pkg], pkg)); msg != "" {
			t.Error("test files: " + msg)
		}
	}
}

// checkImports returns a violation message, or "".
func checkImports(pkg string, imports, extraInternal []string) string {
	rule := -1
	for i, r := range depRule {
		if r.pkg == pkg || strings.HasSuffix(r.pkg, "/...") && strings.HasPrefix(pkg+"/", strings.TrimSuffix(r.pkg, "...")) {
			rule = i
			break
		}
	}
	if rule < 0 {
		return "package " + pkg + " is not in the dependency rule"
	}
	r := depRule[rule]
	for _, imp := range imports {
		switch {
		case strings.HasPrefix(imp, "github.com/jackc/") && pkg != "batchstore/pgstore" &&
			!(extraInternal != nil && strings.HasPrefix(pkg, "examples/")): // an example's test may tidy a database
			return pkg + " may not import " + imp + ": only batchstore/pgstore imports pgx"
		case isStdlib(imp):
		case strings.HasPrefix(imp, module+"/") || imp == module:
			inner := strings.TrimPrefix(imp, module+"/")
			if !allowed(inner, r.internal) && !allowed(inner, extraInternal) {
				return pkg + " may not import " + inner
			}
		case extraInternal != nil && (allowedPrefix(imp, testExternal) || allowedPrefix(imp, testOnlyExternal[pkg])):
		default:
			if !allowedPrefix(imp, r.external) {
				return pkg + " may not import " + imp
			}
		}
	}
	return ""
}

func allowed(p string, list []string) bool {
	for _, a := range list {
		if a == "*" || a == p {
			return true
		}
	}
	return false
}

func allowedPrefix(p string, list []string) bool {
	for _, a := range list {
		if a == "*" || strings.HasPrefix(p, a) {
			return true
		}
	}
	return false
}

func TestCheckImports(t *testing.T) {
	t.Parallel()
	f := func(pkg string, imports []string, wantViolation bool) {
		t.Helper()
		if got := checkImports(pkg, imports, nil) != ""; got != wantViolation {
			t.Errorf("checkImports(%s, %v) violation = %v, want %v", pkg, imports, got, wantViolation)
		}
	}
	f("batch", []string{"context", "github.com/google/uuid"}, false)
	f("batch", []string{"zombiezen.com/go/sqlite"}, true)
	f("batch", []string{module + "/batchstore"}, true)
	f("batchhttp", []string{module + "/batchstore"}, true)
	f("batchhttp", []string{module + "/batch", "net/http"}, false)
	f("batchcli", []string{module + "/batchhttp"}, false)
	f("batchcli", []string{module + "/batchstore"}, true)
	f("batch/batchtest", []string{module + "/batchhttp"}, true)
	f("examples/batchd", []string{module + "/batchstore", "github.com/x/y"}, false)
	f("batchstore/pgstore", []string{pgx + "/pgxpool", module + "/batch"}, false)
	f("batchstore/pgstore", []string{module + "/batchstore"}, true)
	f("batchstore", []string{pgx}, true)
	f("batch", []string{pgx + "/pgconn"}, true)
	f("examples/batchd", []string{module + "/batchstore/pgstore"}, false)
	f("examples/batchd", []string{pgx + "/pgxpool"}, true)
	f("batchhttp", []string{kinOpenAPI + "openapi3"}, true) // outside its tests
	f("newpkg", nil, true)

	// Test files: kin-openapi in batchhttp's only.
	ft := func(pkg string, imports []string, wantViolation bool) {
		t.Helper()
		if got := checkImports(pkg, imports, append(testDepRule[pkg], pkg)) != ""; got != wantViolation {
			t.Errorf("checkImports(%s test files, %v) violation = %v, want %v", pkg, imports, got, wantViolation)
		}
	}
	ft("batchhttp", []string{kinOpenAPI + "openapi3filter", "go.uber.org/goleak"}, false)
	ft("batchcli", []string{kinOpenAPI + "openapi3"}, true)
	ft("batch", []string{kinOpenAPI + "openapi3"}, true)
	ft("batch", []string{"github.com/pelletier/go-toml/v2"}, false)
	ft("batchhttp", []string{"github.com/BurntSushi/toml"}, true)
}

// TestKinOpenAPIOnlyInTests checks the whole import graph of the library's
// packages, tests left out: none of them compiles kin-openapi or what it
// brings (gorilla/mux, a JSON Schema validator, a YAML parser), nor the
// TOML libraries batch's tests decode its config with.
func TestKinOpenAPIOnlyInTests(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := []string{module + "/batch", module + "/batch/batchtest", module + "/batchstore", module + "/batchstore/pgstore",
		module + "/batchnet", module + "/batchhttp", module + "/batchcli"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range append([]string{"github.com/getkin/", "github.com/gorilla/", "github.com/santhosh-tekuri/", "go.yaml.in/"}, tomlLibraries...) {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("the library depends on %s outside its tests", dep)
			}
		}
	}
}

// TestPgxOnlyInPgstore checks the whole import graph, not just direct
// imports: a host that imports the core or an adapter other than
// batchstore/pgstore never compiles pgx.
func TestPgxOnlyInPgstore(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := []string{module + "/batch", module + "/batch/batchtest", module + "/batchstore", module + "/batchhttp", module + "/batchcli"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/jackc/") || strings.HasPrefix(dep, module+"/batchstore/pgstore") {
			t.Errorf("%v depend on %s", pkgs, dep)
		}
	}
}
