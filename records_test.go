package salvage

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestOneDefinitionPerRecord: no two struct types of the module, outside
// tests, encode to the same JSON shape (the same set of three or more
// field names). A record of the contract — an envelope, a limit, a
// worker's heartbeat, a bulk result — is defined once, in salvagetype or
// where it is written, and every layer uses that type (the root aliases
// it); a second definition kept equal by hand is how the two drift apart.
// A public view that shows part of a machinery record is a different
// shape and is not caught here: TestPublicViewsShowEveryField keeps those
// honest.
func TestOneDefinitionPerRecord(t *testing.T) {
	t.Parallel()
	shapes := map[string][]string{}
	files, _ := moduleFiles(t)
	for path, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Assign.IsValid() {
				return true
			}
			if st, ok := ts.Type.(*ast.StructType); ok {
				if names := jsonNames(st); len(names) >= 3 {
					k := strings.Join(names, ",")
					shapes[k] = append(shapes[k], path+": "+ts.Name.Name)
				}
			}
			return true
		})
	}
	if len(shapes) < 50 {
		t.Fatalf("found %d record shapes: the walk missed the module", len(shapes))
	}
	for shape, defs := range shapes {
		if len(defs) > 1 {
			t.Errorf("one JSON shape defined %d times: %s\n\tfields: %s", len(defs), strings.Join(defs, ", "), shape)
		}
	}
}

// moduleFiles parses every non-test Go file of the module, by path, for
// the tests that read the whole source (one walk, one parse per test).
func moduleFiles(t *testing.T) (map[string]*ast.File, *token.FileSet) {
	t.Helper()
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files[path] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, fset
}

// jsonNames is the sorted JSON field names of st's tagged fields.
func jsonNames(st *ast.StructType) []string {
	var names []string
	for _, f := range st.Fields.List {
		if f.Tag == nil {
			continue
		}
		tag, err := strconv.Unquote(f.Tag.Value)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
