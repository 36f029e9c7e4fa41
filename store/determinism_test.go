package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// TestFSMApplyPathReadsNoClockRandomnessOrIO is Nomad's lint rule as a
// test: the functions that run when an entry is applied name no clock, no
// randomness and no I/O package.
func TestFSMApplyPathReadsNoClockRandomnessOrIO(t *testing.T) {
	applyPath := map[string]bool{
		"fsm.Apply": true, "fsm.apply": true, "fsm.remember": true, "fsm.raise": true,
		"fsm.StoreConfiguration": true, "Decode": true, "checkNames": true, "ReqIDOf": true,
		"resultOf": true, "result.err": true, "DecodeKEKs": true, "fsm.applySecret": true, "decodeSecret": true,
		"fsm.syncSecrets": true,
	}
	forbidden := map[string]map[string]bool{
		"time": {"Now": true, "Since": true, "Until": true, "After": true, "Sleep": true, "NewTimer": true, "NewTicker": true, "Tick": true, "AfterFunc": true},
		"rand": nil, "os": nil, "net": nil, "io": nil, "http": nil,
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	for _, file := range []string{"fsm.go", "secrets.go", "command/command.go", "command/secret.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				typ := fd.Recv.List[0].Type
				if st, ok := typ.(*ast.StarExpr); ok {
					typ = st.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			if !applyPath[name] {
				continue
			}
			found[name] = true
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				if names, bad := forbidden[pkg.Name]; bad && (names == nil || names[sel.Sel.Name]) {
					t.Errorf("%s: %s uses %s.%s", fset.Position(sel.Pos()), name, pkg.Name, sel.Sel.Name)
				}
				return true
			})
		}
	}
	for fn := range applyPath {
		if !found[fn] {
			t.Errorf("apply-path function %s not found: update the list", fn)
		}
	}
}
