// Run by suspend.test.mjs as a second process: resumes a stored run by its
// id with the same tools, and prints the result as JSON.
import { Client, tool } from 'nexus-loop';

const job = JSON.parse(process.argv[2]);
const sendEmail = tool({
  name: 'send_email',
  description: 'Sends an email once approved',
  inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
  execute: ({ to }, ctx) => (ctx.answer ? `sent to ${ctx.request.data.to}` : `not approved: ${to}`),
});
const client = new Client(job.options);
const result = await client.resume(job.runId, { answers: job.answers, tools: [sendEmail] });
process.stdout.write(JSON.stringify(result));
