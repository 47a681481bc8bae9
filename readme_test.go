package workerpool_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README stays short: at most 15 KB.
func TestReadmeIsAtMost15KB(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), 15*1024, "README.md is %d bytes", len(b))
}

// Every Go block of the README compiles, because it is code that does: the
// whole of a program the module builds, or whole statements of a runnable
// Example, lines in a row as the Example has them, so that a reader can
// follow them (no statement cut short, no line taken from the middle of
// another). A comment above the block says which:
// <!-- program: FILE --> or <!-- example: FILE FUNC -->.
func TestReadmeCodeIsRunnableCode(t *testing.T) {
	blocks := readmeGoBlocks(t)
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		f := strings.Fields(b.marker)
		switch {
		case len(f) == 2 && f[0] == "program:":
			src, err := os.ReadFile(f[1])
			require.NoError(t, err)
			assert.Equal(t, string(src), b.code, "README block at line %d is not %s", b.line, f[1])
		case len(f) == 3 && f[0] == "example:":
			body := funcSource(t, f[1], f[2])
			assert.True(t, linesInARow(b.code, body), "README block at line %d: not lines of %s in %s, in a row:\n%s", b.line, f[2], f[1], b.code)
			assert.NoError(t, wholeStatements(b.code), "README block at line %d: not whole statements:\n%s", b.line, b.code)
		default:
			t.Errorf("README block at line %d: no <!-- program: FILE --> or <!-- example: FILE FUNC --> above it (%q)", b.line, b.marker)
		}
	}
}

type readmeBlock struct {
	line   int
	marker string // the comment above the block, without <!-- -->
	code   string
}

// readmeGoBlocks returns the README's ```go blocks.
func readmeGoBlocks(t *testing.T) []readmeBlock {
	f, err := os.Open("README.md")
	require.NoError(t, err)
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	marker := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		case line == "```go":
			cur = &readmeBlock{line: n, marker: marker}
		case strings.HasPrefix(line, "<!--"):
			marker = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "<!--"), "-->"))
		case strings.TrimSpace(line) != "":
			marker = ""
		}
	}
	require.NoError(t, sc.Err())
	return blocks
}

// funcSource returns the source of the func name in file.
func funcSource(t *testing.T, file, name string) string {
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0)
	require.NoError(t, err)
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == name {
			return string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset])
		}
	}
	t.Fatalf("no func %s in %s", name, file)
	return ""
}

// linesInARow reports whether the lines of code, trimmed, are lines of
// body, trimmed, in a row.
func linesInARow(code, body string) bool {
	trimmed := func(s string) []string {
		var ls []string
		for l := range strings.Lines(s) {
			ls = append(ls, strings.TrimSpace(l))
		}
		return ls
	}
	want, have := trimmed(code), trimmed(body)
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(want, have[i:i+len(want)]) {
			return true
		}
	}
	return false
}

// wholeStatements returns an error unless code parses as a list of whole
// statements: the body of a func.
func wholeStatements(code string) error {
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+code+"}\n", 0)
	return err
}

// docs/guarantees.md names every test of the package and of its internal
// packages under the guarantee it checks, and names only tests that exist.
func TestGuaranteesNameEveryTest(t *testing.T) {
	doc, err := os.ReadFile("docs/guarantees.md")
	require.NoError(t, err)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9_]+|Fuzz[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		named[m[1]] = true
	}
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	internal, err := filepath.Glob("internal/*/*_test.go")
	require.NoError(t, err)
	files = append(files, internal...)
	exists := map[string]bool{}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil {
				continue
			}
			name := fd.Name.Name
			if (strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "Fuzz")) && name != "TestMain" {
				exists[name] = true
				assert.True(t, named[name], "%s (%s) is not under a guarantee in docs/guarantees.md", name, file)
			}
		}
	}
	for name := range named {
		assert.True(t, exists[name], "docs/guarantees.md names %s, which is not a test", name)
	}
}
