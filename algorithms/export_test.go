package algorithms

// DecideWithDecideLua has a Decider decide every request with decide.lua
// rather than the script built for its shape.
func DecideWithDecideLua() DeciderOption { return func(d *Decider) { d.decideLua = true } }
