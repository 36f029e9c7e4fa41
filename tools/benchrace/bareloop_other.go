//go:build !linux

package main

import (
	"errors"
	"net"
)

var errLoopServer = errors.New("bare-loop: Linux only")

func listenLoop() (int, string, error) { return -1, "", errLoopServer }

func runLoop(int, string) error { return errLoopServer }

func runGor(net.Listener, string) error { return errors.New("bare-gor: Linux only") }
