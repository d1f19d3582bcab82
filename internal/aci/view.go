package aci

// observeOnly are the requests a view-only session (a desktop viewer
// opened without input) may make: they look, never touch.
var observeOnly = map[string]bool{
	"hello": true, "screen": true, "cursor": true, "windows": true, "screenshot": true,
	"screencast_start": true, "screencast_stop": true, "screencast_keyframe": true,
}
