#!/bin/sh
echo poll
