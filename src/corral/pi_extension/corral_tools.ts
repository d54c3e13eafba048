/**
 * corral's Pi extension: a confined Pi turn's `bash` (with intents) and `failure_disposition` are corral's
 * MCP tools, reached with the turn's own token (docs/harnesses.md, "Pi's trusted path"). corral loads it by path
 * (`pi -e <this file>`, with `--no-extensions`), from its installed package, read-only in the sandbox.
 */
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";
import { corralTools } from "./mcp_door.mjs";

export default function (pi: ExtensionAPI): void {
	for (const tool of corralTools(process.env)) {
		pi.registerTool(tool as Parameters<ExtensionAPI["registerTool"]>[0]);
	}
}
