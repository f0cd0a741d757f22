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
	{"batch", []string{"github.com/google/uuid", "github.com/VictoriaMetrics/metrics"}, []string{"batch/batchdriver", "batch/batchobserve"}},
	{"batch/batchdriver", nil, nil},
	{"batch/batchobserve", nil, []string{"batch/batchdriver"}},
	{"batch/batchsift", nil, []string{"batch"}},
	{"batch/batchtest", nil, []string{"batch", "batch/batchdriver"}},
	{"batch/batchdriver/batchdrivertest", nil, []string{"batch", "batch/batchdriver", "batch/batchtest", "batch/batchsift"}},
	{"batchstore", []string{"zombiezen.com/go/sqlite", "modernc.org/"}, []string{"batch/batchdriver", "internal/migrations"}},
	{"batchstore/pgstore", []string{pgx}, []string{"batch/batchdriver", "internal/migrations"}},
	{"batchnet", nil, []string{"batch"}},
	{"batchhttp", nil, []string{"batch", "batchnet"}},
	{"batchhttp/batchserver", []string{"github.com/VictoriaMetrics/metrics"}, []string{"batch", "batchhttp"}},
	{"batchcli", nil, []string{"batch", "batchhttp"}},
	{"batchconsole", nil, []string{"batch", "batch/batchdriver"}},
	{"internal/migrations", nil, nil},
	{"internal/apitest", nil, []string{"batch", "batchhttp", "batchhttp/batchserver"}}, // test support: imported by test files only
	{"internal/pgtest", []string{pgx}, nil},                                            // test support: imported by test files only
	{"batchotel", []string{otelAPI}, []string{"batch", "batch/batchdriver", "batch/batchobserve"}},
	{"examples/...", []string{"*"}, []string{"*"}},
}

// testDepRule adds what test files may import on top.
var testDepRule = map[string][]string{
	"batch":                             {"batch/batchtest", "batch/batchsift"},
	"batch/batchsift":                   {},
	"batch/batchdriver":                 {},
	"batch/batchobserve":                {},
	"batch/batchtest":                   {},
	"batch/batchdriver/batchdrivertest": {"batch/batchtest"},
	"batchstore":                        {"batch", "batch/batchtest", "batch/batchdriver/batchdrivertest"},
	"batchstore/pgstore":                {"batch", "batch/batchtest", "batch/batchdriver/batchdrivertest", "internal/pgtest"},
	"batchnet":                          {},
	"internal/migrations":               {},
	"internal/apitest":                  {},
	"internal/pgtest":                   {},
	"batchhttp":                         {"batch/batchtest", "batch/batchdriver", "batch/batchdriver/batchdrivertest", "batch/batchsift", "batchhttp/batchserver"}, // batchserver: the examples' key auth
	"batchhttp/batchserver":             {"batch/batchtest"},
	"batchcli":                          {"batch/batchtest", "batchhttp", "batchhttp/batchserver", "internal/apitest", "batch/batchsift"},
	"batchotel":                         {"batch/batchtest", "batch/batchsift", "batchstore", "batchstore/pgstore", "internal/pgtest"},
	"batchconsole":                      {"batch/batchtest"},
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
	// batchotel's tests record spans with the SDK's in-memory exporter.
	"batchotel": {otelSDK},
}

// otelAPI is the OpenTelemetry API module and otelSDK its SDK: only
// batchotel imports the API (and the examples, which build a provider),
// and only its tests the SDK, so that a host that does not trace never
// compiles OpenTelemetry, and one that does picks its own SDK and
// exporter (see TestOtelOnlyInBatchotel).
const (
	otelAPI = "go.opentelemetry.io/otel"
	otelSDK = "go.opentelemetry.io/otel/sdk"
)

// isOtelSDK reports whether imp is part of OpenTelemetry but not of its
// API: the SDK, the exporters, the contrib instrumentation.
func isOtelSDK(imp string) bool {
	return strings.HasPrefix(imp, "go.opentelemetry.io/") && !allowedPrefix(imp, []string{otelAPI}) ||
		allowedPrefix(imp, []string{otelSDK, otelAPI + "/exporters"})
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
	// Standard output only: go list may report on standard error what it
	// downloads, which is not a package line.
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}}|{{join .XTestImports \" \"}}", module+"/...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
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
		case strings.HasPrefix(imp, "github.com/jackc/") && pkg != "batchstore/pgstore" && pkg != "internal/pgtest" &&
			!(extraInternal != nil && strings.HasPrefix(pkg, "examples/")): // an example's test may tidy a database
			return pkg + " may not import " + imp + ": only batchstore/pgstore (and internal/pgtest, the tests' database) imports pgx"
		case strings.HasPrefix(imp, "go.opentelemetry.io/") && pkg != "batchotel" && !strings.HasPrefix(pkg, "examples/"):
			return pkg + " may not import " + imp + ": only batchotel imports OpenTelemetry"
		case isOtelSDK(imp) && pkg == "batchotel" && extraInternal == nil:
			return pkg + " may not import " + imp + ": the SDK and exporters are the host's choice (tests only)"
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

// allowedPrefix reports whether p is one of list or below one: an entry
// that ends in "/" matches any path it starts, another one the path itself
// and the paths below it.
func allowedPrefix(p string, list []string) bool {
	for _, a := range list {
		if a == "*" || p == a || strings.HasPrefix(p, a) && (strings.HasSuffix(a, "/") || strings.HasPrefix(p, a+"/")) {
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
	f("batchhttp", []string{"github.com/VictoriaMetrics/metrics"}, true) // the metrics endpoint is batchserver's
	f("batchhttp", []string{module + "/batchhttp/batchserver"}, true)
	f("batchhttp/batchserver", []string{module + "/batchhttp", module + "/batch", "github.com/VictoriaMetrics/metrics"}, false)
	f("batchhttp/batchserver", []string{module + "/batchstore"}, true)
	f("batchcli", []string{module + "/batchhttp"}, false)
	f("batchcli", []string{module + "/batchstore"}, true)
	f("batch/batchtest", []string{module + "/batchhttp"}, true)
	f("examples/batchd", []string{module + "/batchstore", "github.com/x/y"}, false)
	f("batchstore/pgstore", []string{pgx + "/pgxpool", module + "/batch/batchdriver"}, false)
	f("batchstore/pgstore", []string{module + "/batch"}, true)
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

	// OpenTelemetry: the API in batchotel only, the SDK in its tests only.
	f("batchotel", []string{otelAPI, otelAPI + "/trace", otelAPI + "/semconv/v1.43.0", module + "/batch"}, false)
	f("batchotel", []string{otelSDK + "/trace"}, true)
	f("batchotel", []string{otelAPI + "/exporters/otlp/otlptrace/otlptracehttp"}, true)
	f("batchotel", []string{"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"}, true)
	f("batchotel", []string{module + "/batchstore"}, true)
	f("batch", []string{otelAPI + "/trace"}, true)
	f("batchhttp", []string{otelAPI}, true)
	f("batchstore", []string{otelAPI + "/attribute"}, true)
	f("examples/batchd", []string{otelSDK + "/trace", module + "/batchotel"}, false)
	f("batch", []string{"github.com/google/uuidx"}, true) // a prefix of a name is not the name
	ft("batchotel", []string{otelSDK + "/trace/tracetest", module + "/batchstore", module + "/internal/pgtest"}, false)
	ft("batchotel", []string{pgx}, true) // its database goes through internal/pgtest
	ft("batchhttp", []string{otelSDK + "/trace"}, true)
	ft("batchstore", []string{pgx}, true)
}

// TestOtelOnlyInBatchotel checks the whole import graph of the library's
// packages but batchotel, tests left out: none of them compiles
// OpenTelemetry; and batchotel's compiles its API, not its SDK.
func TestOtelOnlyInBatchotel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	deps := func(pkgs ...string) []string {
		out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	for _, dep := range deps(module+"/batch", module+"/batch/batchtest", module+"/batchstore", module+"/batchstore/pgstore",
		module+"/batchnet", module+"/batchhttp", module+"/batchhttp/batchserver", module+"/batchcli") {
		if strings.HasPrefix(dep, "go.opentelemetry.io/") || dep == module+"/batchotel" {
			t.Errorf("the library outside batchotel depends on %s", dep)
		}
	}
	sawAPI := false
	for _, dep := range deps(module + "/batchotel") {
		sawAPI = sawAPI || dep == otelAPI+"/trace"
		// (The API itself brings go.opentelemetry.io/auto/sdk, its hook for
		// eBPF auto-instrumentation, which is no SDK a host would pick.)
		if allowedPrefix(dep, []string{otelSDK, otelAPI + "/exporters"}) {
			t.Errorf("batchotel depends on %s outside its tests", dep)
		}
	}
	if !sawAPI {
		t.Errorf("batchotel does not depend on %s/trace: the check checks nothing", otelAPI)
	}
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
		module + "/batchnet", module + "/batchhttp", module + "/batchhttp/batchserver", module + "/batchcli"}
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
	pkgs := []string{module + "/batch", module + "/batch/batchtest", module + "/batchstore", module + "/batchhttp", module + "/batchhttp/batchserver", module + "/batchcli"}
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
