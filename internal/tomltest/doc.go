// Package tomltest holds the tests that decode batch.Config with the two
// common TOML libraries. It is a module of its own, so that the root
// module, which a host requires, does not require them.
package tomltest
