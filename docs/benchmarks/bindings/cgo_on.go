//go:build cgo

package main

const cgoEnabled = "1"
