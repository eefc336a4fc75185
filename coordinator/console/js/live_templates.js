// Live Activity templates: what an editor starts from (a football match,
// an election night, a line of text), the fields each update asks for, and
// the lock-screen preview of an activity's attributes and content state.

/** A field of an update: its content-state key, label and input type. */
const field = (key, label, type = 'text') => ({ key, label, type });

export const TEMPLATES = {
  match: {
    label: 'Football match',
    name: 'England v France',
    attributes_type: 'MatchAttributes',
    topic: 'sport/football',
    attributes: { home: 'England', away: 'France', competition: 'Friendly' },
    content_state: { home: 0, away: 0, minute: 0, status: 'Kick-off' },
    alert: { title: 'Kick-off', body: 'England v France has started' },
    // Score updates; the result is the status line ("Full time").
    fields: [field('home', 'Home score', 'number'), field('away', 'Away score', 'number'),
      field('minute', 'Minute', 'number'), field('status', 'Result or status')],
    preview: (a, s) => ({
      title: `${a.home ?? '?'} ${s.home ?? 0} – ${s.away ?? 0} ${a.away ?? '?'}`,
      line: [s.minute ? `${s.minute}'` : null, s.status].filter(Boolean).join(' · '),
      caption: a.competition ?? '',
    }),
  },
  election: {
    label: 'Election night',
    name: 'General election',
    attributes_type: 'ElectionAttributes',
    topic: 'politics/uk',
    attributes: { first: 'Labour', second: 'Conservative', seats: 650 },
    content_state: { first: 0, second: 0, declared: 0, status: 'Polls closed' },
    alert: { title: 'Polls have closed', body: 'Follow the results as they come in' },
    fields: [field('first', 'Seats (first party)', 'number'), field('second', 'Seats (second party)', 'number'),
      field('declared', 'Seats declared', 'number'), field('status', 'Result or status')],
    preview: (a, s) => ({
      title: `${a.first ?? '?'} ${s.first ?? 0} · ${a.second ?? '?'} ${s.second ?? 0}`,
      line: [`${s.declared ?? 0} of ${a.seats ?? '?'} declared`, s.status].filter(Boolean).join(' · '),
      caption: 'Results',
    }),
  },
  text: {
    label: 'Live text',
    name: 'Live blog',
    attributes_type: 'LiveTextAttributes',
    topic: 'breaking/uk',
    attributes: { title: 'Live' },
    content_state: { text: 'Following events as they happen' },
    alert: null,
    fields: [field('text', 'Text')],
    preview: (a, s) => ({ title: a.title ?? 'Live', line: s.text ?? '', caption: '' }),
  },
};

/** The template whose ActivityAttributes type is `type` (text when none). */
export function templateOf(type) {
  return Object.values(TEMPLATES).find((t) => t.attributes_type === type) ?? TEMPLATES.text;
}

/** An update's content state from the fields' inputs (numbers as numbers). */
export function readState(template, valueOf) {
  const state = {};
  for (const f of template.fields) {
    const raw = valueOf(f.key).trim();
    state[f.key] = f.type === 'number' ? Number(raw || 0) : raw;
  }
  return state;
}
