/** The top two lines: where the data comes from and how fresh it is; the tabs with counts and the breadcrumb. */
import type React from "react";
import { Box, Text } from "ink";
import { clock, fit } from "../format.js";
import type { FleetSnapshot } from "../source.js";

export type Tab = "sessions" | "commands" | "claims" | "incidents" | "jobs";
export const TABS: Tab[] = ["sessions", "commands", "claims", "incidents", "jobs"];
const TITLES: Record<Tab, string> = { sessions: "Sessions", commands: "Commands", claims: "Claims", incidents: "Incidents", jobs: "Jobs" };

export function Header(p: { fleet: FleetSnapshot; tab: Tab; crumb: string; width: number }): React.ReactElement {
  const f = p.fleet;
  const st = f.status;
  const connected = f.sessions.filter((s) => s.link === "connected").length;
  const openIncidents = f.incidents.filter((i) => !i.acknowledged).length;
  const health = st.connected ? `updated ${clock(st.updatedAt)}` : `DISCONNECTED${st.error ? `: ${st.error}` : ""}`;
  // On a narrow terminal the facts shrink before anything is cut, so how fresh the data is stays whole.
  const n = f.sessions.length;
  const shorter = [
    [`${n} clients, ${connected} connected`, ...f.notes, health],
    [`${connected}/${n} connected`, ...f.notes, health],
    [`${connected}/${n} connected`, health],
    [`${connected}/${n} up`, st.connected ? clock(st.updatedAt) : health],
  ].map((parts) => parts.join(" · "));
  const lefts = [`RVBox · ${st.label} · ${st.feed}`, `${st.label} · ${st.feed}`, st.label];
  const left = lefts.find((l) => l.length + 3 + shorter.at(-1)!.length <= p.width) ?? lefts.at(-1)!;
  const room = p.width - Math.min(left.length + 3, p.width);
  const facts = shorter.find((s) => s.length <= room) ?? shorter.at(-1)!;
  const mk = (short: boolean) =>
    TABS.map((t, i) => {
      const n = t === "claims" ? f.claims.length : t === "incidents" ? openIncidents : null;
      return { t, text: short ? `${i + 1}${TITLES[t][0]}${n ? n : ""} ` : ` ${i + 1} ${TITLES[t]}${n ? ` (${n})` : ""} ` };
    });
  let tabs = mk(false);
  if (tabs.reduce((n, x) => n + x.text.length, 0) > p.width) tabs = mk(true);
  const tabsLen = tabs.reduce((n, x) => n + x.text.length, 0);
  return (
    <Box flexDirection="column" width={p.width}>
      <Text>
        <Text bold color="cyan">
          {fit(left, Math.min(left.length + 3, Math.max(0, p.width)))}
        </Text>
        <Text color={st.connected ? undefined : "red"}>{fit(facts, Math.max(0, p.width - Math.min(left.length + 3, p.width)))}</Text>
      </Text>
      <Text>
        {tabs.map((x) => (
          <Text
            key={x.t}
            inverse={x.t === p.tab}
            bold={x.t === p.tab}
            color={x.t === "claims" && f.claims.length ? "yellow" : x.t === "incidents" && openIncidents ? "yellow" : undefined}
          >
            {x.text}
          </Text>
        ))}
        <Text dimColor>{fit(p.crumb ? ` › ${p.crumb}` : "", Math.max(0, p.width - tabsLen))}</Text>
      </Text>
    </Box>
  );
}
