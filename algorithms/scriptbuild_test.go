package algorithms

import (
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite decide.lua from algorithms/lua")

// TestDecideIsBuilt: decide.lua, the script the nginx module and the
// Decider's refunds run, is what algorithms/lua builds, byte for byte, and
// the package runs that file. go generate ./algorithms (this test with
// -update) writes it.
func TestDecideIsBuilt(t *testing.T) {
	built, err := buildDecide()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("decide.lua", []byte(built), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file, err := os.ReadFile("decide.lua")
	if err != nil {
		t.Fatal(err)
	}
	if string(file) != built {
		t.Fatal("decide.lua is not what algorithms/lua builds: run go generate ./algorithms")
	}
	if decideSource != built {
		t.Fatal("the package runs a decide.lua other than the file: rebuild")
	}
}

// TestShapesBuild: a script builds for every algorithm alone and in
// shadow, for every algorithm after every other, and for the most limits a
// shape holds; and none for no limits or more than that.
func TestShapesBuild(t *testing.T) {
	var shapes [][]shapeLimit
	for _, a := range algorithmNames {
		shapes = append(shapes, []shapeLimit{{algorithm: a}}, []shapeLimit{{algorithm: a, shadow: true}})
		for _, b := range algorithmNames {
			shapes = append(shapes, []shapeLimit{{algorithm: a}, {algorithm: b, shadow: true}})
		}
	}
	most := make([]shapeLimit, maxShape)
	for i := range most {
		most[i] = shapeLimit{algorithm: algorithmNames[i%len(algorithmNames)]}
	}
	shapes = append(shapes, most)
	for _, s := range shapes {
		if _, _, err := shapeOf(s); err != nil {
			t.Errorf("%v: %v", s, err)
		}
	}
	for _, s := range [][]shapeLimit{nil, append(most, most[0])} {
		if _, _, err := shapeOf(s); err == nil {
			t.Errorf("a shape of %d limits built", len(s))
		}
	}
}
