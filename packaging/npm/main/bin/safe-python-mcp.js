#!/usr/bin/env node
"use strict";
require("../lib/launch.js")("safe-python-mcp");
