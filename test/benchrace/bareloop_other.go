//go:build !linux

package main

import "errors"

var errLoopServer = errors.New("bare-loop: Linux only")

func listenLoop() (int, string, error) { return -1, "", errLoopServer }

func runLoop(int, string) error { return errLoopServer }
