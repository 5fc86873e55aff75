# Source material for corpus.txt (imported by make_tokenizer_golden.py).
# Hand-written sentences in several languages plus word lists for procedural
# English prose; make_tokenizer_golden.py mixes them deterministically.
# Nothing here is needed by CI.

EN_PARAGRAPHS = [
    "A tokenizer turns text into a sequence of integer ids. The model never sees the "
    "characters themselves, only the ids, so the tokenizer used at training time must be "
    "exactly the one used at inference time. Even a single different id can change the "
    "output of a large language model.",
    "Byte-pair encoding starts from single bytes or characters and repeatedly merges the "
    "most frequent adjacent pair. After a few thousand merges, common words such as "
    "\"the\", \"and\" and \"model\" become single tokens, while rare words are split into "
    "several pieces.",
    "It's not hard to see why people like it: it doesn't need a dictionary, it can't fail "
    "on unknown words, and it's fast. We've trained many models with it, and they'd all "
    "agree that it's a good default. I'm sure you'll like it too; you're going to use it "
    "every day.",
    "The training run lasted 14 days on 512 GPUs. Each step processed 4,194,304 tokens, "
    "and the learning rate was warmed up over the first 2000 steps to a peak of 3e-4 "
    "before decaying with a cosine schedule to 3e-5.",
    "On Monday, March 3rd, the team met at 9:30 a.m. to review the results. Dr. Smith "
    "presented a chart showing loss versus compute; Mr. Jones asked whether the "
    "evaluation set had leaked into the training data (it hadn't).",
    "Please don't forget: the checkpoint directory must contain config.json, "
    "tokenizer.json and tokenizer_config.json, otherwise the loader will refuse it.",
    "She said, \"I'll be back in five minutes.\" He replied, 'We'll wait.' They didn't.",
    "WHAT'S THE ANSWER? IT'S 42. DON'T PANIC. WE'VE GOT A TOWEL. I'D BRING TWO.",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "
    "How vexingly quick daft zebras jump!",
    "Version 2.1.0 was released on 2024-11-05; version 2.2.0 followed on 2025-02-17 with "
    "a 12.5% speed-up and 37 bug fixes.",
]

EN_WORDS = {
    "adj": [
        "small", "large", "fast", "slow", "bright", "quiet", "ancient", "modern", "simple",
        "complex", "green", "blue", "red", "distributed", "parallel", "careful", "happy",
        "tired", "curious", "heavy", "light", "strange", "useful", "broken", "new", "old",
    ],
    "noun": [
        "model", "engine", "river", "mountain", "teacher", "student", "computer", "garden",
        "tokenizer", "gradient", "optimizer", "network", "city", "village", "book", "letter",
        "server", "kernel", "tensor", "matrix", "window", "bridge", "train", "cat", "dog",
        "bird", "forest", "ocean", "language", "sentence", "word", "number", "checkpoint",
    ],
    "verb": [
        "reads", "writes", "trains", "watches", "builds", "breaks", "finds", "loses",
        "computes", "carries", "follows", "opens", "closes", "moves", "saves", "loads",
        "sees", "helps", "teaches", "learns", "splits", "merges", "counts", "sorts",
    ],
    "adv": [
        "quickly", "slowly", "carefully", "quietly", "again", "today", "yesterday",
        "sometimes", "always", "never", "often", "together", "alone", "early", "late",
    ],
    "name": [
        "Alice", "Bob", "Carol", "Dave", "Eve", "Mallory", "Trent", "Peggy", "Victor",
        "Walter", "Zoe", "Yuki", "Ivan", "Fatima", "Pierre", "Greta", "Wei", "Olga",
    ],
}

EN_TEMPLATES = [
    "The {adj} {noun} {verb} the {adj2} {noun2} {adv}.",
    "{name} {verb} a {adj} {noun} {adv}.",
    "Why does the {noun} {verb2} the {noun2}?",
    "{name} said that the {noun} {verb} {num} {noun2}s.",
    "If the {noun} is {adj}, then the {noun2} is {adj2}.",
    "{name}'s {noun} {verb} the {noun2}, but {name2} doesn't know why.",
    "We've seen {num} {adj} {noun}s {adv}; they're {adj2}.",
    "I'll tell {name} that the {noun} isn't {adj} anymore!",
    "Step {num}: the {noun} {verb} {num2} {noun2}s in {float} seconds.",
    "There are {num} {noun}s and {num2} {noun2}s, i.e. {total} in total.",
]

FR = [
    "Le tokeniseur transforme le texte en une suite d'identifiants entiers.",
    "Il était une fois, dans un petit village au bord de la mer, une fille très curieuse.",
    "Nous avons entraîné le modèle pendant trois semaines sur des données publiques.",
    "Où est la bibliothèque ? Elle est à côté de l'école, près du café.",
    "L'été dernier, j'ai visité Paris, Lyon et Marseille avec ma sœur.",
    "Ça ne fait rien : les résultats sont déjà très encourageants, n'est-ce pas ?",
    "Les élèves ont réussi l'examen ; le professeur était ravi et ému.",
    "Voilà pourquoi il faut toujours vérifier les données avant l'entraînement.",
]

DE = [
    "Der Tokenizer zerlegt den Text in kleine Stücke, die das Modell verarbeiten kann.",
    "Grüße aus München! Das Wetter ist heute schön, aber morgen soll es regnen.",
    "Die Straße vor unserem Haus wird nächste Woche für drei Tage gesperrt.",
    "Können Sie mir bitte sagen, wie spät es ist? Es ist fünf nach zwölf.",
    "Wir haben das Modell mit größeren Datenmengen trainiert und bessere Ergebnisse erzielt.",
    "Übung macht den Meister, sagt man, und Geduld ist eine Tugend.",
    "Die Äpfel, Birnen und Pflaumen aus dem Garten schmecken süß.",
    "Donaudampfschifffahrtsgesellschaftskapitän ist ein sehr langes Wort.",
]

ZH = [
    "分词器把文本转换成整数序列。",
    "我们在三周内训练了这个模型，使用了公开的数据。",
    "今天天气很好，我们去公园散步吧。",
    "机器学习是人工智能的一个重要分支。",
    "这本书非常有意思，我已经读了两遍了。",
    "请问去火车站怎么走？一直往前走，然后向左转。",
    "大型语言模型需要大量的计算资源和高质量的数据。",
    "中文没有空格，所以分词是一个有趣的问题。",
]

JA = [
    "トークナイザーはテキストを整数の列に変換します。",
    "今日はとても良い天気ですね。散歩に行きましょう。",
    "私は東京に住んでいて、毎日電車で会社に通っています。",
    "日本語にはひらがな、カタカナ、漢字の三種類の文字があります。",
    "この本はとても面白いので、ぜひ読んでみてください。",
    "機械学習のモデルを訓練するには、たくさんのデータが必要です。",
    "すみません、駅はどこですか？まっすぐ行って右です。",
]

RU = [
    "Токенизатор преобразует текст в последовательность целых чисел.",
    "Мы обучали модель в течение трёх недель на открытых данных.",
    "Сегодня хорошая погода, давайте пойдём гулять в парк.",
    "Москва — столица России, а Санкт-Петербург — её культурная столица.",
    "Это очень интересная книга, я прочитал её уже два раза.",
    "Машинное обучение — важная часть искусственного интеллекта.",
    "Извините, как пройти к вокзалу? Идите прямо, потом налево.",
]

AR = [
    "يحوّل المحلل النصي النص إلى سلسلة من الأرقام الصحيحة.",
    "قمنا بتدريب النموذج لمدة ثلاثة أسابيع على بيانات عامة.",
    "الطقس جميل اليوم، هيا نذهب إلى الحديقة.",
    "التعلم الآلي فرع مهم من فروع الذكاء الاصطناعي.",
    "هذا الكتاب ممتع جداً، وقد قرأته مرتين.",
    "من فضلك، أين محطة القطار؟ امشِ مباشرة ثم انعطف يساراً.",
]

CODE = [
    '''def tokenize(text: str) -> list[int]:
    """Split text into ids."""
    ids = []
    for word in text.split():
        if word in vocab:
            ids.append(vocab[word])
        else:
            ids.extend(byte_fallback(word))
    return ids
''',
    '''class Trainer:
    def __init__(self, model, lr=3e-4, steps=1000):
        self.model = model
        self.lr = lr
        self.steps = steps

    def run(self):
        for step in range(self.steps):
            loss = self.model.forward()
            loss.backward()
            print(f"step {step}: loss={loss.item():.4f}")
''',
    '''#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
\tstd::vector<int> ids = {1, 2, 3};
\tfor (size_t i = 0; i < ids.size(); ++i) {
\t\tstd::printf("%d\\n", ids[i]);
\t}
\treturn 0;
}
''',
    '''template <typename T>
T clamp(T x, T lo, T hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}
''',
    '''{
  "model_type": "llama",
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "vocab_size": 32000,
  "rms_norm_eps": 1e-05,
  "tie_word_embeddings": false
}
''',
    '''$ cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
$ cmake --build build -j 16
$ ./build/bin/train --config configs/tiny.yaml --steps 100
''',
    '''SELECT name, COUNT(*) AS n
FROM users
WHERE created_at >= '2024-01-01'
GROUP BY name
ORDER BY n DESC;
''',
    '''for (let i = 0; i < 10; i++) {
  if (i % 2 === 0) {
    console.log(`even: ${i}`);
  } else {
    console.log("odd: " + i);
  }
}
''',
    '''# Installation

1. Clone the repository.
2. Run `pip install -e .`
3. Read the [docs](https://example.org/docs) for details.

* bullet one
* bullet two
''',
]
