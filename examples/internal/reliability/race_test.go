//go:build race

package reliability

func init() { raceEnabled = true }
