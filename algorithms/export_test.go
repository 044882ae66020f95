package algorithms

// DecideWithDecideLua has a Decider decide every request with decide.lua
// rather than the script built for its shape.
func DecideWithDecideLua() DeciderOption { return func(d *Decider) { d.decideLua = true } }

// ShapeScript is the script built for one request of algs' limits, and
// the ARGV of a request of checks to it, with members for those that take
// one, on Redis's clock.
func ShapeScript(algs ...string) (string, func(checks []Check, members []string) []any, error) {
	limits := make([]shapeLimit, len(algs))
	for i, a := range algs {
		limits[i] = shapeLimit{algorithm: a}
	}
	s, src, err := shapeOf(limits)
	if err != nil {
		return "", nil, err
	}
	return src, func(checks []Check, members []string) []any { return s.argv(checks, members, "") }, nil
}
