package algorithms

// DecideSource is the text of decide.lua, the script a Decider runs, for
// engines that run it themselves (the OpenResty module).
func DecideSource() string { return decideSource }
