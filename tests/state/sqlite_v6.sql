-- turngate SQLite state file, schema version 6 (PRAGMA user_version = 6).
-- Saved from a real store (the v5 file, opened: its canonical turns may go on with
-- the turn before them); never edit: it is what old files hold.
BEGIN TRANSACTION;
CREATE TABLE canonical_turns (
        conversation_key TEXT NOT NULL REFERENCES conversations (conversation_key),
        revision INTEGER NOT NULL,
        cancel_generation INTEGER NOT NULL,
        digest TEXT NOT NULL,
        operation_id TEXT,
        at REAL NOT NULL, continues INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (conversation_key, revision)
    ) WITHOUT ROWID;
INSERT INTO "canonical_turns" VALUES('conv-saved',0,0,'sha256:5555555555555555555555555555555555555555555555555555555555555555',NULL,6.0,0);
INSERT INTO "canonical_turns" VALUES('conv-saved',1,0,'sha256:6666666666666666666666666666666666666666666666666666666666666666','op-saved-2',6.0,0);
CREATE TABLE client_keys (
        scope TEXT PRIMARY KEY,
        operation_id TEXT NOT NULL,
        body_digest TEXT NOT NULL,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID;
INSERT INTO "client_keys" VALUES('scope-saved','op-saved-2','sha256:body',86406.0);
CREATE TABLE conversations (
        conversation_key TEXT PRIMARY KEY,
        cancel_generation INTEGER NOT NULL,
        updated_at REAL NOT NULL
    ) WITHOUT ROWID;
INSERT INTO "conversations" VALUES('conv-saved',0,6.0);
CREATE TABLE history (
                operation_id TEXT NOT NULL REFERENCES operations (operation_id),
                seq INTEGER NOT NULL,
                state TEXT NOT NULL,
                transition TEXT,
                at REAL NOT NULL,
                detail TEXT,
                PRIMARY KEY (operation_id, seq)
            ) WITHOUT ROWID;
INSERT INTO "history" VALUES('op-saved-1',0,'PREPARED',NULL,1.0,NULL);
INSERT INTO "history" VALUES('op-saved-1',1,'DISPATCHING','claim',1.0,NULL);
INSERT INTO "history" VALUES('op-saved-1',2,'FAILED','fail',2.0,'upstream 529 overloaded');
INSERT INTO "history" VALUES('op-saved-2',0,'PREPARED',NULL,3.0,NULL);
INSERT INTO "history" VALUES('op-saved-2',1,'DISPATCHING','claim',3.0,NULL);
INSERT INTO "history" VALUES('op-saved-2',2,'SENT','send',4.0,NULL);
INSERT INTO "history" VALUES('op-saved-2',3,'STREAMING','stream',5.0,'é ✓');
INSERT INTO "history" VALUES('op-saved-2',4,'COMMITTED','commit',6.0,NULL);
INSERT INTO "history" VALUES('op-saved-3',0,'PREPARED',NULL,7.0,NULL);
INSERT INTO "history" VALUES('op-saved-3',1,'DISPATCHING','claim',7.0,NULL);
INSERT INTO "history" VALUES('op-saved-3',2,'SENT','send',8.0,NULL);
CREATE TABLE logs (
                id INTEGER PRIMARY KEY,
                kind TEXT NOT NULL,
                at REAL NOT NULL,
                entry TEXT NOT NULL
            );
INSERT INTO "logs" VALUES(2,'shadow',12.0,'{"api":"openai_chat","note":"é ✓"}');
INSERT INTO "logs" VALUES(3,'shadow',13.0,'{"api":"anthropic","note":"newest"}');
INSERT INTO "logs" VALUES(4,'quarantine',14.0,'{"handle":"msg_late"}');
CREATE TABLE operations (
                operation_id TEXT PRIMARY KEY,
                conversation_key TEXT NOT NULL,
                conversation_revision INTEGER NOT NULL,
                cancel_generation INTEGER NOT NULL,
                attempt INTEGER NOT NULL,
                state TEXT NOT NULL,
                handle TEXT,
                manifest TEXT NOT NULL,
                UNIQUE (conversation_key, conversation_revision, cancel_generation, attempt)
            );
INSERT INTO "operations" VALUES('op-saved-1','conv-saved',1,0,1,'FAILED',NULL,'{"adapter":"openai_chat@1","api":"openai_chat","attempt":1,"cancelGeneration":0,"conversationId":"conv-saved","conversationRevision":1,"createdAt":1700000000.0,"credentialHash":"hmac:cred","idempotencyKey":"turngate-c6266a7698e62835397c0b0d3da61e0e97c00e27","model":"gpt-test","operationId":"op-saved-1","policyDigest":"sha256:3333333333333333333333333333333333333333333333333333333333333333","provider":"openai","requestDigest":"sha256:4444444444444444444444444444444444444444444444444444444444444444","route":"/openai/v1/chat/completions","schemaVersion":"turngate.DispatchManifest.v1","sequenceDigest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","stream":true,"toolsetDigest":"sha256:2222222222222222222222222222222222222222222222222222222222222222"}');
INSERT INTO "operations" VALUES('op-saved-2','conv-saved',1,0,2,'COMMITTED','msg_saved','{"adapter":"openai_chat@1","api":"openai_chat","attempt":2,"cancelGeneration":0,"conversationId":"conv-saved","conversationRevision":1,"createdAt":1700000000.0,"credentialHash":"hmac:cred","idempotencyKey":"turngate-b90a19bf22e38154067176794c1bc2ce623b656d","model":"gpt-test","operationId":"op-saved-2","policyDigest":"sha256:3333333333333333333333333333333333333333333333333333333333333333","provider":"openai","requestDigest":"sha256:4444444444444444444444444444444444444444444444444444444444444444","route":"/openai/v1/chat/completions","schemaVersion":"turngate.DispatchManifest.v1","sequenceDigest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","stream":true,"toolsetDigest":"sha256:2222222222222222222222222222222222222222222222222222222222222222"}');
INSERT INTO "operations" VALUES('op-saved-3','op-saved-3',0,0,1,'SENT',NULL,'{"adapter":"openai_chat@1","api":"openai_chat","attempt":1,"cancelGeneration":0,"conversationId":null,"conversationRevision":0,"createdAt":1700000000.0,"credentialHash":"hmac:cred","idempotencyKey":"turngate-20ab3e1efdf4064c17ee1be4f8cfca892d8cb43e","model":"gpt-test","operationId":"op-saved-3","policyDigest":"sha256:3333333333333333333333333333333333333333333333333333333333333333","provider":"openai","requestDigest":"sha256:4444444444444444444444444444444444444444444444444444444444444444","route":"/openai/v1/chat/completions","schemaVersion":"turngate.DispatchManifest.v1","sequenceDigest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","stream":true,"toolsetDigest":"sha256:2222222222222222222222222222222222222222222222222222222222222222"}');
CREATE TABLE responses (
        operation_id TEXT PRIMARY KEY,
        status INTEGER NOT NULL,
        content_type TEXT NOT NULL,
        streamed INTEGER NOT NULL,
        body BLOB NOT NULL,
        expires_at REAL NOT NULL
    );
INSERT INTO "responses" VALUES('op-saved-2',200,'text/event-stream',1,X'646174613A20C3A920E29C930A0A',86406.0);
CREATE UNIQUE INDEX operations_one_live
                ON operations (conversation_key, conversation_revision, cancel_generation)
                WHERE state IN ('DISPATCHING', 'SENT', 'STREAMING', 'UNKNOWN', 'COMMITTED');
CREATE INDEX operations_by_state ON operations (state);
CREATE INDEX logs_by_kind ON logs (kind, id);
CREATE INDEX responses_by_expiry ON responses (expires_at);
CREATE INDEX client_keys_by_expiry ON client_keys (expires_at);
CREATE INDEX conversations_by_update ON conversations (updated_at);
COMMIT;
