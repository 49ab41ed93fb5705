package archtest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/splitzip/splitzip"

// row is one package's line of the document's table.
type row struct {
	layer   int
	imports []string // splitzip packages, module prefix dropped
	line    int
}

// root is the module's folder, two above this package's.
func root(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH (a test binary carried to a machine without Go): nothing to compare with")
	}
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// table reads the package table of docs/ARCHITECTURE.md.
func table(t *testing.T, dir string) map[string]row {
	t.Helper()
	path := filepath.Join(dir, "docs", "ARCHITECTURE.md")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]row{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		cells := strings.Split(strings.Trim(strings.TrimSpace(sc.Text()), "|"), "|")
		if len(cells) != 4 {
			continue
		}
		layer, err := strconv.Atoi(strings.TrimSpace(cells[0]))
		if err != nil {
			continue // the header, the separator
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var imports []string
		if list := strings.TrimSpace(cells[3]); list != "-" {
			for _, p := range strings.Split(list, ",") {
				imports = append(imports, strings.TrimSpace(p))
			}
		}
		if _, dup := rows[name]; dup {
			t.Errorf("%s:%d: %s has a second row", path, n, name)
		}
		rows[name] = row{layer: layer, imports: imports, line: n}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no package table found", path)
	}
	return rows
}

// goList runs go list in dir and returns, for each package of the
// module, the module's packages it imports (or, with deps, all it links).
func goList(t *testing.T, dir string, deps bool, pkgs ...string) map[string][]string {
	t.Helper()
	field := "Imports"
	if deps {
		field = "Deps"
	}
	args := append([]string{"list", "-e", "-f", "{{.ImportPath}}|{{join ." + field + " \" \"}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, imps, _ := strings.Cut(line, "|")
		var own []string
		for _, p := range strings.Fields(imps) {
			if rel, ok := strings.CutPrefix(p, module+"/"); ok {
				own = append(own, rel)
			}
		}
		slices.Sort(own)
		m[strings.TrimPrefix(name, module+"/")] = own
	}
	return m
}

// TestTable: every package has a row whose imports are exactly the
// package's and whose layer is one more than the highest it imports, so
// that no package imports one above it; and only the commands import
// internal/loadbench.
func TestTable(t *testing.T) {
	dir := root(t)
	rows := table(t, dir)
	actual := goList(t, dir, false, "./...")
	for name, imps := range actual {
		r, ok := rows[name]
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md: package %s has no row (it imports %v)", name, imps)
			continue
		}
		if slices.Contains(imps, "internal/loadbench") && !strings.HasPrefix(name, "cmd/") {
			t.Errorf("%s imports internal/loadbench: only the commands may (the load is assembled by package load)", name)
		}
		listed := slices.Sorted(slices.Values(r.imports))
		if !slices.Equal(listed, imps) {
			t.Errorf("docs/ARCHITECTURE.md:%d: %s lists %v, imports %v", r.line, name, listed, imps)
		}
		want := 1
		for _, p := range imps {
			if pr, ok := rows[p]; ok {
				want = max(want, pr.layer+1)
			}
		}
		if r.layer != want {
			t.Errorf("docs/ARCHITECTURE.md:%d: %s is on layer %d; its imports put it on %d", r.line, name, r.layer, want)
		}
	}
	for name, r := range rows {
		if _, ok := actual[name]; !ok {
			t.Errorf("docs/ARCHITECTURE.md:%d: %s is no package of the module", r.line, name)
		}
	}
}

// TestRules: the contracts and the transports link no GPU package.
func TestRules(t *testing.T) {
	dir := root(t)
	for name, deps := range goList(t, dir, true, "./engine", "./engine/hostengine", "./transport") {
		for _, p := range deps {
			if p == "gpu" || strings.HasPrefix(p, "gpu/") {
				t.Errorf("%s links %s: the contracts and the transports must build without the GPU packages", name, p)
			}
		}
	}
}
